"""FabricParams: the one declaration of the fabric's parameters, and what its fields generate (the scenario
schema's fabric section, the topo flags, the up --topo keys, the results' fabric block)."""
import argparse
import dataclasses

import pytest

from testbed import scenario
from testbed.cli import up
from testbed.fabric import kinds, params
from testbed.fabric.params import FabricParams, TopologyError
from testbed.results import results_schema

NAMES = [f.name for f, _ in params.fields()]


def topo_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    params.add_flags(parser)
    return parser


def test_every_field_is_in_the_scenario_schema_with_its_default_and_description():
    schema = params.scenario_schema()
    assert list(schema["properties"]) == ["kind", *NAMES] and schema["required"] == ["kind"]
    assert schema["properties"]["kind"]["enum"] == list(kinds.NAMES)
    for f, p in params.fields():
        prop = schema["properties"][f.name]
        assert prop["description"] == p.description
        assert prop.get("default") == f.default        # hb_mbps: worked out from nic_mbps, no default
        if p.check in ("delay", "queue", "ecn", "pfc"):      # a number (ecn, pfc: thresholds), or a map by tier
            assert [o["type"] for o in prop["anyOf"]] == ["object" if p.check in ("ecn", "pfc") else "number",
                                                          "object"]
            assert list(prop["anyOf"][1]["properties"]) == list(params.TIERS)
        else:
            assert prop["type"] == {"count": "integer", "links": "object", "flag": "boolean", "sites": "object",
                                    "wan": "array"}.get(p.check, "number")
    assert scenario.SCHEMA["properties"]["fabric"] == schema


def test_the_schema_defaults_are_the_models():
    made = FabricParams("rail-optimized")
    for name, prop in params.scenario_schema()["properties"].items():
        if "default" in prop:
            assert getattr(made, name) == prop["default"], name


def test_every_field_has_a_topo_flag_and_unset_flags_are_not_given():
    args = topo_parser().parse_args(["clos", "--servers", "3", "--gpus", "2"])
    assert args.kind == "clos" and params.given(args) == {"servers": 3, "gpus_per_server": 2}
    argv = ["clos"]
    values = {"count": "7", "flag": "true", "links": '{"rail0-spine0": {"mbps": 2}}', "delay": "nic=5,uplink=7.5",
              "ecn": '{"kmin_kb": 5, "kmax_kb": 200, "pmax": 0.2}'}
    for f, p in params.fields():
        argv += ["--" + f.name.replace("_", "-"), values.get(p.check, "7.5")]
    given = params.given(topo_parser().parse_args(argv))
    assert set(given) == set(NAMES)
    assert given["delay_us"] == {"nic": 5.0, "uplink": 7.5} and given["queue_kb"] == 7.5
    assert given["ideal_uplinks"] is True and given["links"] == {"rail0-spine0": {"mbps": 2}}
    assert given["ecn"] == {"kmin_kb": 5, "kmax_kb": 200, "pmax": 0.2}


def test_topo_needs_servers_and_gpus_and_takes_the_long_name_too(capsys):
    with pytest.raises(SystemExit):
        topo_parser().parse_args(["clos", "--servers", "2"])
    assert "--gpus" in capsys.readouterr().err
    args = topo_parser().parse_args(["clos", "--servers", "2", "--gpus-per-server", "4"])
    assert params.given(args)["gpus_per_server"] == 4


def test_up_topo_keys_are_the_fields_and_their_short_names():
    keys = params.topo_keys()
    assert set(keys.values()) == set(NAMES) and keys["gpus"] == "gpus_per_server"
    doc = up.topo_doc("rail-optimized,servers=3,gpus=2,nic-mtu=1500,spare_servers=1")
    assert doc["fabric"] == {"kind": "rail-optimized", "servers": 3, "gpus_per_server": 2, "nic_mtu": 1500,
                             "spare_servers": 1}


def test_the_results_block_and_its_schema_come_from_the_fields():
    props, required = params.results_schema()
    values = FabricParams("clos", servers=3).results_values()
    assert list(values) == [k for k in props if k != "time_scaled_from"] and set(required) <= set(props)
    block = results_schema.FABRIC
    assert all(block["properties"][k] == v for k, v in props.items()) and set(required) <= set(block["required"])
    assert values == {"kind": "clos", "servers": 3, "gpus_per_server": 2, "nic_mbps": 5.0, "hb_mbps": 45.0,
                      "nic_mtu": 9000, "hb_mtu": 32832, "delay_us": 0.0, "queue_kb": None, "ecn": None, "pfc": None,
                      "ideal_uplinks": False,
                      "time_scale": 1.0, "sites": None, "wan": None, "link_overrides": None, "faithful": True}


def test_values_are_resolved_when_made():
    p = FabricParams("rail-only", 2, 2, spines=5, nic_mbps=10, oversubscription=2)
    assert (p.spines, p.nic_mbps, p.hb_mbps, p.oversubscription) == (0, 10.0, 90.0, 2.0)
    assert isinstance(p.nic_mbps, float) and p.design is kinds.get("rail-only")
    assert FabricParams(**p.to_json()) == p                 # what state.json keeps builds the same fabric
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.servers = 3


@pytest.mark.parametrize("values, message", [
    (dict(kind="mesh"), "unknown fabric kind 'mesh'; choose one of rail-only, rail-optimized, clos"),
    (dict(kind="clos", servers=0), "servers must be between 1 and 200, got 0"),
    (dict(kind="clos", servers=2.0), "servers must be an integer, got 2.0"),
    (dict(kind="clos", gpus_per_server=True), "gpus_per_server must be an integer, got True"),
    (dict(kind="clos", spines=65), "spines must be between 1 and 64, got 65"),
    (dict(kind="clos", oversubscription=0.5), "oversubscription must be a ratio between 1 and 64, got 0.5"),
    (dict(kind="clos", nic_mbps=0), r"nic_mbps must be a rate in Mbit/s in \(0, 100000\], got 0"),
    (dict(kind="clos", hb_mbps="fast"), "hb_mbps must be a rate in Mbit/s in"),
    (dict(kind="clos", nic_mtu=1087), "nic_mtu must be between 1088 and 9216, got 1087"),
    (dict(kind="clos", hb_mtu=65535), "hb_mtu must be between 1088 and 32832, got 65535"),
    (dict(kind="clos", servers=150, spare_servers=51), "spare_servers must be between 0 and 50, got 51"),
])
def test_a_bad_value_is_named(values, message):
    with pytest.raises(TopologyError, match=message):
        FabricParams(**values)


def test_an_unknown_parameter_is_refused():
    with pytest.raises(TypeError, match="racks"):
        FabricParams("clos", racks=2)


def test_ignored_parameters_are_the_kinds():
    assert params.ignored_params("rail-only", ["servers", "oversubscription", "spines"]) == ["oversubscription",
                                                                                            "spines"]
    assert params.ignored_params("clos", ["spines"]) == []
