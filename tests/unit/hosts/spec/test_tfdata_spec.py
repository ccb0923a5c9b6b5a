"""The input-pipeline programs' specs (hosts/spec/tfdata.py): the trainer's JSON and the servers' flags."""
import pytest

from hosts.spec import ServiceSpec, SpecError, TrainerSpec


@pytest.mark.parametrize("spec", [
    TrainerSpec(pipeline="compute", policy="fastflow", gpu_steps_per_s=25),
    TrainerSpec(pipeline="compute", policy="fixed", gpu_steps_per_s=20.5, service="grpc://10.0.0.1:5050",
                pipeline_cfg={"batch": 8, "nested": {"a": [1, 2]}}, seed=3, ratio=0.5, candidate="p'2",
                candidates=("p'2",), start_signal=True),
])
def test_trainer_round_trip(spec):
    assert TrainerSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("doc,named", [
    ({"pipeline": "compute", "policy": "greedy", "gpu_steps_per_s": 1}, "policy: 'greedy' is not one of"),
    ({"pipeline": "compute", "policy": "fixed", "gpu_steps_per_s": 1, "candidates": "p'2"},
     "candidates: expected a list"),
    ({"pipeline": "compute", "policy": "fixed", "gpu_steps_per_s": 1, "ratios": [0.5]}, "ratios: unknown key"),
    ({"pipeline": "compute", "policy": "fixed"}, "gpu_steps_per_s: required key"),
])
def test_trainer_rejects_naming_the_key(doc, named):
    with pytest.raises(SpecError, match="^" + named):
        TrainerSpec.from_dict(doc)


@pytest.mark.parametrize("spec", [ServiceSpec(role="dispatcher", port=5050),
                                  ServiceSpec(role="worker", port=5051, ip="10.11.250.2", dispatcher="10.11.250.1:5050")])
def test_service_argv_round_trip(spec):
    assert ServiceSpec.from_argv(spec.to_argv()) == spec
    assert ServiceSpec.from_json(spec.to_json()) == spec


def test_a_worker_needs_its_address_and_the_dispatcher():
    with pytest.raises(SystemExit):
        ServiceSpec.from_argv(["worker", "--port", "5051"])
