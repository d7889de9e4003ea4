"""The optimize command on the example cluster with hostile input drawn by hypothesis (tests/hostile.py): the A100
VariantAutoscaling's metadata, a profile pair set to one extreme (``alpha = beta = 1e308`` overflows only
combined) or its status replaced by garbage, and a file of hostile YAML structure beside it.

Whatever is drawn: no traceback, exit 0 or 3 (never 1 or 2: one object's input never stops the run), and the
other VariantAutoscalings are written as on a clean run. A handful of derandomized examples (a run each).
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from engine.api.registry import VARIANT_AUTOSCALING
from tests.flows.test_optimize_hostile import LLAMA, others_written, run
from tests.hostile import GARBAGE, bounded, extreme_numbers, metadata, status_garbage, yaml_streams

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deployments" / "examples"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _edits() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("metadata"), metadata()),
        st.tuples(st.sampled_from(["decodeParms", "prefillParms"]), extreme_numbers()),
        st.tuples(st.just("status"), status_garbage(["currentAlloc", "desiredOptimizedAlloc", "actuation", "slo"])),
        st.tuples(st.just("status conditions"), st.sampled_from(GARBAGE)),
    )


def _hostile_a100(documents: list[Any], edit: tuple[str, Any]) -> list[Any]:
    """The llama file's documents with the A100 VariantAutoscaling edited."""
    where, value = edit
    va = next(d for d in documents if d["kind"] == VARIANT_AUTOSCALING and d["metadata"]["name"].endswith("a100"))
    if where == "metadata":
        va["metadata"] = value
    elif where == "status":
        va["status"] = value
    elif where == "status conditions":
        va["status"] = {"conditions": value}
    else:
        parms = va["spec"]["variantProfile"]["perfParms"][where]
        for key in parms:
            parms[key] = str(value)
    return documents


@bounded(5)
@given(edit=_edits(), stream=yaml_streams())
def _optimize_on_hostile_input(
    tmp: pathlib.Path, metrics: pathlib.Path, edit: tuple[str, Any], stream: tuple[str, list[str]]
) -> None:
    cluster = tmp / f"cluster-{len(list(tmp.iterdir()))}"
    shutil.copytree(EXAMPLES, cluster)
    documents = [d for d in yaml.load_all((cluster / LLAMA).read_text(), Loader=_Loader) if d]  # noqa: S506
    (cluster / LLAMA).write_text(yaml.dump_all(_hostile_a100(documents, edit), Dumper=_Dumper, sort_keys=False))
    (cluster / "99-hostile.yaml").write_text(stream[0])
    code, output = run(cluster, metrics)  # asserts no traceback
    assert code in (0, 3), output
    (cluster / "99-hostile.yaml").unlink()  # the check reads every file with a plain loader
    others_written(cluster)


def test_optimize_on_hostile_input_never_fails_the_others(
    prefect_harness: None, tmp_path: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    _optimize_on_hostile_input(tmp_path, example_metrics)
