"""The built-in digits: the same split whether made by scikit-learn or read back from the cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

#: Prints the split's arrays (as lists) and whether scikit-learn was imported to get them.
PROBE = """
import json, sys
from tfjob_worker import data
s = data.digits(int(sys.argv[1]), image=sys.argv[2] == "image")
print(json.dumps({"sklearn": "sklearn" in sys.modules, "shape": list(s.train[0].shape),
                  "arrays": [a.tolist() for pair in (s.train, s.val, s.test) for a in pair]}))
"""


def digits_in_a_process(cache: Path, seed: int, image: bool = False) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(seed), "image" if image else "flat"], check=True,
                         capture_output=True, text=True, env={"XDG_CACHE_HOME": str(cache), "PATH": "/usr/bin:/bin",
                                                              "PYTHONPATH": ":".join(sys.path)})
    return json.loads(out.stdout)


def test_the_first_process_splits_with_scikit_learn_and_the_next_reads_the_same_arrays_without_it(
        tmp_path: Path) -> None:
    first = digits_in_a_process(tmp_path, 42)
    again = digits_in_a_process(tmp_path, 42, image=True)
    other_seed = digits_in_a_process(tmp_path, 7)
    assert first["sklearn"] and not again["sklearn"] and other_seed["sklearn"]
    assert (first["shape"], again["shape"]) == ([1293, 64], [1293, 8, 8, 1])  # 72% of 1797 examples
    for flat, image in zip(first["arrays"], again["arrays"], strict=True):
        assert np.array_equal(np.asarray(flat).reshape(np.asarray(image).shape), image)
    assert first["arrays"][1] != other_seed["arrays"][1]  # another seed, another order
    kept = sorted(p.name for p in (tmp_path / "tfjob-worker").iterdir())
    # no partial file left beside the two splits
    assert len(kept) == 2 and all(name.startswith(("digits-seed42-", "digits-seed7-")) for name in kept), kept


def test_an_unwritable_cache_still_gives_the_split(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert digits_in_a_process(blocked, 42)["shape"] == [1293, 64]
