"""examples/quickstart.ipynb: committed without outputs, and it runs top to bottom (as CI runs it)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
QUICKSTART = EXAMPLES / "quickstart.ipynb"


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(QUICKSTART, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the quickstart has no code cells"
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, (f"code cells {dirty} carry outputs or execution counts: clear them before committing "
                       "(in Jupyter: Edit > Clear Outputs of All Cells, then save)")


@pytest.mark.slow
def test_quickstart_executes_top_to_bottom(tmp_path, monkeypatch):
    # the kernel inherits the environment: runs go under tmp_path (tempfile honours TMPDIR), the token
    # cache is conftest's isolated DEPTHLAB_CACHE
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.rglob("*"))
    nb = nbformat.read(QUICKSTART, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = sum("image/png" in o.get("data", {}) for o in outputs)
    assert images >= 4, f"expected the report figures and both probe plots inline, got {images} images"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "--- step 150 ---" in text and "rank collapse" in text and "ROMEO:" in text
    assert sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.rglob("*")) == before, "the notebook wrote into examples/"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("depthlab-quickstart-")], "no run under TMPDIR"
