"""The JSON form of layouts (shardx/Layout/LayoutJson.h) as Python reads it:
the layouts in the program description a compiled artifact embeds (its
text, read as plain JSON) are the ones the executor's reader
(shardx/Exec/ProgramInfo.h) gives, and layouts go to JSON and back
unchanged."""

import json
import os

import pytest

from shardx import artifact
from shardx.sharded_tensor import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_program_description_layouts_read_alike(tmp_path):
    src = os.path.join(ROOT, "examples", "mlp_dp_tp.mlir")
    with open(src) as f:
        path = artifact.compile_mlir(f.read(), str(tmp_path / "mlp.so"))
    compiled = runtime().Artifact(path)
    info = json.loads(compiled.program_info)  # the embedded text as plain JSON
    seen = 0
    for fn in info["functions"]:
        for kind in ("inputs", "outputs"):
            specs = getattr(compiled, kind)(fn["name"])
            assert len(specs) == len(fn[kind])
            for raw, spec in zip(fn[kind], specs):
                if "layout" not in raw:
                    assert spec["layout"] is None
                    continue
                layout = runtime().Layout.from_json(json.dumps(raw["layout"]))
                assert layout == spec["layout"], raw["layout"]["text"]
                assert raw["layout"]["text"].endswith(f", {layout}>")
                seen += 1
    assert seen >= 3


@pytest.mark.parametrize("placements,mesh,shape", [
    ([("S", 0, 1, ""), ("R", -1, 1, "")], [2, 2], [8, 4]),
    ([("S", 0, 1, ""), ("S", 0, 1, "")], [2, 3], [7, 5]),       # uneven
    ([("SS", 0, 2, ""), ("S", 0, 1, "")], [2, 2], [16, 2]),     # strided
    ([("P", -1, 1, "max"), ("S", 1, 1, "")], [2, 2], [4, 6]),   # partial
    ([("P", -1, 1, "sum"), ("P", -1, 1, "avg")], [2, 2], [3]),
])
def test_layouts_round_trip(placements, mesh, shape):
    layout = runtime().Layout.from_placements(placements, mesh, shape)
    text = layout.to_json()
    back = runtime().Layout.from_json(text)
    assert back == layout
    assert back.to_json() == text
    assert len(json.loads(text)["partials"]) == len(mesh)


@pytest.mark.parametrize("text", [
    "{",
    '{"dims": []}',
    '{"dims": [], "partials": ["mean"]}',
    '{"dims": [{"dim": 0, "splits": [[0, 1]]}], "partials": ["sum"]}',
    '{"dims": [{"dim": 0, "splits": [[3, 1]]}], "partials": [null]}',
])
def test_bad_layout_json_raises(text):
    with pytest.raises(ValueError, match="bad layout JSON"):
        runtime().Layout.from_json(text)
