"""depthlab.sweep.common: a finished run counts when its config matches (execution fields and newer
defaults aside)."""





def test_finished_runs_match_despite_execution_fields_and_newer_defaults():
    from depthlab.config import RunConfig
    from depthlab.sweep.common import config_diff

    now = RunConfig().to_dict()
    then = RunConfig().to_dict()
    then["train"]["compile"] = False  # the default became "auto": same computation on CPU
    del then["data"]["tokenizer"]  # written before the field existed; now at its default
    assert config_diff(now, then) == []
    then["train"]["learning_rate"] = 0.5
    assert config_diff(now, then) == ["train.learning_rate: 0.5 there, 0.003 now"]


def test_a_finished_run_older_than_train_optimizer_counts_as_adamw():
    from depthlab.config import RunConfig
    from depthlab.sweep.common import config_diff

    old = RunConfig().to_dict()
    del old["train"]["optimizer"]  # a run made before the field existed: it trained with AdamW
    want = RunConfig().to_dict()
    want["train"]["optimizer"] = "adamw"
    assert config_diff(want, old) == []  # the profiles pin adamw: their finished runs still count
    want["train"]["optimizer"] = "auto"  # muon on CPU: not what that run did
    assert config_diff(want, old) == ["train.optimizer: 'adamw' there, 'auto' now"]
