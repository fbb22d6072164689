"""The committed *_pb2.py files and their *_pb2.pyi stubs are exactly what protoc (and
mypy-protobuf) make of the committed .proto files."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted(p.relative_to(ROOT) for p in (ROOT / "autotune_cache").rglob("*.proto"))
# The gencode is made by this grpcio-tools release (protobuf 4.25 gencode), because that gencode
# runs on every protobuf runtime from 4.25 to 7.x, including the older ones GPU images ship.
GRPCIO_TOOLS = "1.62.3"
# The type stubs (*_pb2.pyi) for `mypy --strict` users; pinned in pyproject.toml's test extra.
MYPY_PROTOBUF = "5.1.0"


@pytest.mark.parametrize("proto", PROTOS, ids=str)
def test_gencode_is_up_to_date(proto, tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed")
    from importlib.metadata import version

    if version("grpcio-tools") != GRPCIO_TOOLS:
        pytest.fail(f"gencode must be made with grpcio-tools=={GRPCIO_TOOLS}, found "
                    f"{version('grpcio-tools')}; run tools/dev.sh setup")
    plugin = Path(sys.executable).parent / "protoc-gen-mypy"
    if version("mypy-protobuf") != MYPY_PROTOBUF:
        pytest.fail(f"stubs must be made with mypy-protobuf=={MYPY_PROTOBUF}, found "
                    f"{version('mypy-protobuf')}; run tools/dev.sh setup")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}",
                    f"--plugin=protoc-gen-mypy={plugin}", f"--python_out={tmp_path}",
                    f"--mypy_out={tmp_path}", str(proto)], check=True, cwd=ROOT)
    for suffix in ("_pb2.py", "_pb2.pyi"):
        generated = tmp_path / proto.with_name(proto.stem + suffix)
        committed = ROOT / generated.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is missing"
        if generated.read_bytes() != committed.read_bytes():
            pytest.fail(f"{committed.relative_to(ROOT)} is out of date with {proto}; regenerate "
                        f"with python -m grpc_tools.protoc -I. --python_out=. --mypy_out=. "
                        f"{proto}")
