"""`Optimizer.load_state_dict` leaves nothing pending: a run resumed in the same process replays the
run that went on bit for bit, on the fused devices too.

The restored state is computed by ops (AdamW packs its moments behind the parameter with a `cat`).
Left pending, they joined the fusion blocks of the next step, moved where its blocks were cut, and
changed the last bits of its gradients: the transformer case under AdamW, resumed on Device.cpu()
after step 3, went off in the last bits from step 6.
"""

from __future__ import annotations

from .cases import Case, resume, train

CASE = Case("adamw", "transformer")


def test_resumed_in_process_equals_the_run_that_went_on(device, tmp_path):
    train(CASE, device)  # the plans of a whole run are cached, as in a process that trained before
    went_on = train(CASE, device, checkpoint_at=3, folder=tmp_path)
    resumed = resume(CASE, device, tmp_path)
    assert resumed.losses.tobytes() == went_on.losses.tobytes(), f"{resumed.losses} != {went_on.losses}"
    for name, value in went_on.module.items():
        assert resumed.module[name].tobytes() == value.tobytes(), name
