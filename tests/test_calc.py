"""The sizing model reproduces the paper's Table 2 and Table 1 from switch parameters."""

from hpnlab.model import calc
from hpnlab.model.spec import load_spec
from tests.conftest import EXAMPLES


def test_table2_matches_paper():
    rows = {r["mechanism"]: (r["tier1_gpus"], r["tier2_gpus"]) for r in calc.table2()}
    assert rows == {
        "51.2Tbps Clos": (64, 2048),
        "Dual-ToR": (128, 4096),
        "Rail-optimized": (1024, 4096),
        "Dual-plane": (1024, 8192),
        "Oversubscription of 15:1": (1024, 15360),
    }
    assert calc.table2()[-1]["tier2_factor"] == 1.875


def test_hpn_pod():
    p = calc.hpn_pod()
    assert p["gpus_per_segment"] == 1024 and p["gpus_per_pod"] == 15360 and p["segments"] == 15
    assert (p["tors"], p["aggs"]) == (240, 120)


def test_table1():
    assert [r["complexity"] for r in calc.table1()] == [60, 4096, 2048, 2304]


def test_path_search_for_specs():
    assert calc.path_search(load_spec(EXAMPLES / "hpn-pod-15k.yml"))["complexity"] == 60
    assert calc.path_search(load_spec(EXAMPLES / "clos.yml"))["complexity"] == 4
