"""A status write leaves every byte outside ``status`` as it was (tasks/clients/cluster/yamlsplice.py).

The fuzz harness found it (tests/flows/test_fuzz_flows.py): writing the failure status of an invalid object
re-rendered odd spec values the write never touched — an empty-string key, floats such as ``5e-324`` —
because the whole document went through a round-trip re-serialisation.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tasks.clients.cluster import LocalCluster, ObjectRef

TEMPLATE = ("aim.silogen.ai/v1alpha1", "AIMServiceTemplate")
READY_FALSE = {
    "conditions": [
        {
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": "spec.x: not a field",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
}

ODD = {
    "apiVersion": TEMPLATE[0],
    "kind": TEMPLATE[1],
    "metadata": {"name": "odd", "namespace": "ns"},
    "spec": {
        "modelName": 2.5e-179,
        "x": {"": 1, "y": 4.9e-273, "z": 1e-300, "w": 1e300, "v": 5e-324, "u": -0.0, "t": "\u202e" + "x" * 5000},
    },
}


def test_status_write_keeps_odd_floats_and_an_empty_key_byte_for_byte(tmp_path: Path) -> None:
    text = yaml.safe_dump(ODD, sort_keys=False, allow_unicode=True)  # as the fuzz harness writes them
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    LocalCluster(tmp_path).patch_status(ObjectRef(*TEMPLATE, "odd", "ns"), READY_FALSE)
    after = path.read_text()
    assert after.startswith(text), after[: len(text)]
    assert after[len(text) :].startswith("status:\n")
    reread = LocalCluster(tmp_path).get(*TEMPLATE, "odd", "ns")
    assert reread["status"]["conditions"] == READY_FALSE["conditions"]


HAND_WRITTEN = """\
# a template someone wrote by hand — für den Fall 🚀
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMServiceTemplate
metadata:
  name: hand
  namespace: ns
  resourceVersion: "7"   # copied from kubectl
status:
  conditions:
    - type: Ready
      status: "True"
      reason: Old
      message: written before
      lastTransitionTime: "2025-01-01T00:00:00Z"

# the spec comes after the status here
spec:
  modelName:   m     # odd spacing kept
  x: {'': 1, v: 5e-324}
"""


def test_status_in_the_middle_is_replaced_in_place_and_the_resource_version_rewritten_on_its_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hand.yaml"
    path.write_text(HAND_WRITTEN)
    written = LocalCluster(tmp_path).patch_status(ObjectRef(*TEMPLATE, "hand", "ns"), READY_FALSE)
    after = path.read_text()
    head, tail = HAND_WRITTEN.split("status:\n", 1)
    rest = tail[tail.index("\n# the spec") :]
    rv = written["metadata"]["resourceVersion"]
    assert rv != "7"
    assert after.startswith(head.replace('resourceVersion: "7"', f'resourceVersion: "{rv}"') + "status:\n"), after
    assert after.endswith(rest), after
    assert "reason: Old" not in after
    assert yaml.safe_load(after)["status"]["conditions"] == READY_FALSE["conditions"]
    assert LocalCluster(tmp_path).get(*TEMPLATE, "hand", "ns")["metadata"]["resourceVersion"] == rv


def test_second_status_write_before_the_file_is_reread_splices_again(tmp_path: Path) -> None:
    text = yaml.safe_dump(ODD, sort_keys=False, allow_unicode=True)
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    cluster = LocalCluster(tmp_path)
    ref = ObjectRef(*TEMPLATE, "odd", "ns")
    cluster.patch_status(ref, READY_FALSE)
    cluster.patch_status(ref, {"conditions": [{**READY_FALSE["conditions"][0], "message": "second"}]})
    after = path.read_text()
    assert after.startswith(text) and after.count("status:\n") == 1
    assert "message: second" in after
