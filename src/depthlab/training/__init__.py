"""The parts a :class:`~depthlab.trainer.Trainer` is wired from, each with its own state and timing.

- :mod:`.runtime`: device, processes, threads, dtype and autocast, attention path, compile, memory check.
- :mod:`.optimization`: the optimizer (AdamW | Muon + AdamW) and the learning-rate schedule, which
  reads the time plan (:class:`depthlab.budget.Plan`) instead of the config being rewritten.
- :mod:`.stepper`: one optimisation step, with the non-finite check on the host or on the device.
- :mod:`.evaluator`: periodic evaluation, best tracking, target / patience, final validation.
- :mod:`.stopping`: why the loop stops now (time, signal, target, patience, plan), agreed by all processes.
- :mod:`.checkpointer`: checkpoints, resume checks and loading, ``init_from``.
- :mod:`.protocol`: what the trainer needs of a model (forward(idx) -> logits, parameters) and the
  optional extras only depthlab's GPT has.
"""
