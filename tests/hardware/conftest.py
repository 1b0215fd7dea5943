"""Where the recorded ``npu-smi`` output lives: ``<repo>/../shared/fixtures/npu-smi``.

CI clones the repository with ``shared/`` placed beside it, as on the development machine.
The fixtures are the point of these tests, so their absence fails instead of skipping.
"""
from pathlib import Path

import pytest

NPU_SMI_FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "npu-smi"


@pytest.fixture(scope="session")
def npu_smi_fixtures() -> Path:
    if not (NPU_SMI_FIXTURES / "README.md").is_file():
        pytest.fail(f"npu-smi fixtures missing: expected them in {NPU_SMI_FIXTURES}")
    return NPU_SMI_FIXTURES
