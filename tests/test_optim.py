"""depthlab.optim: Muon (float32 or bf16 Newton-Schulz, same-shape matrices stacked) + AdamW, the update
torch.optim.Muon defines, resumable."""

import io

import pytest
import torch

from depthlab.optim import Muon, gram_newton_schulz, newton_schulz

from conftest import muon_model_and_optimizer


@pytest.mark.parametrize("shape", [(32, 96), (96, 32), (64, 64)])
def test_newton_schulz_flattens_the_singular_values_and_keeps_the_singular_vectors(shape):
    gen = torch.Generator().manual_seed(0)
    k = min(shape)
    q1 = torch.linalg.qr(torch.randn(shape[0], k, generator=gen))[0]
    q2 = torch.linalg.qr(torch.randn(shape[1], k, generator=gen))[0]
    g = q1 @ torch.diag(torch.logspace(-1, 0, k)) @ q2.T  # singular values spread over 10x
    o = newton_schulz(g)
    s = torch.linalg.svdvals(o)
    assert o.shape == g.shape and o.dtype == torch.float32
    assert 0.6 < s.min() and s.max() < 1.3  # the quintic's band (Jordan et al. 2024)
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    d = u.T @ o @ vh.T  # diagonal when o has g's singular vectors
    assert (d - torch.diag(torch.diagonal(d))).norm() < 0.05 * d.norm()
    torch.testing.assert_close(newton_schulz(7.0 * g), o, atol=1e-5, rtol=0)  # scale-free


def test_gram_form_is_the_same_iteration_for_tall_wide_and_square_stacks():
    gen = torch.Generator().manual_seed(5)
    shapes = [(3, 48, 16), (2, 16, 48), (2, 16, 16), (1, 40, 24), (2, 24, 40)]  # small sides 16 and 24
    stacks = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes]
    for restart in (2, 0, 3):
        out = gram_newton_schulz(stacks, dtype=torch.float64, restart=restart)
        for s, o in zip(stacks, out):
            assert o.shape == s.shape and o.dtype == torch.float64
            torch.testing.assert_close(o, newton_schulz(s, dtype=torch.float64), atol=1e-12, rtol=1e-10)


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_gram_form_in_bf16_stays_as_close_as_the_standard_one_thanks_to_its_restart():
    gen = torch.Generator().manual_seed(6)
    # nearly rank 8 (a gradient's typical spectrum): the case where the Gram matrix's bf16 errors grow
    g = torch.randn(4, 512, 8, generator=gen) @ torch.randn(4, 8, 128, generator=gen)
    g = g + 1e-3 * torch.randn(4, 512, 128, generator=gen)
    ref = newton_schulz(g.double(), dtype=torch.float64)

    def err(o):
        return ((o.double() - ref).norm() / ref.norm()).item()

    standard = err(newton_schulz(g, dtype=torch.bfloat16))
    assert err(gram_newton_schulz([g], dtype=torch.bfloat16)[0]) < 1.2 * standard
    assert err(gram_newton_schulz([g], dtype=torch.bfloat16, restart=0)[0]) > 3 * standard  # no restart: drift


def test_gram_form_in_float32_skips_the_restart_and_stays_within_1e_3_of_float64():
    gen = torch.Generator().manual_seed(7)
    u, _, vh = torch.linalg.svd(torch.randn(3, 256, 64, generator=gen), full_matrices=False)
    decaying = u @ torch.diag_embed(torch.logspace(0, -6, 64).expand(3, -1)) @ vh  # condition number 1e6
    low_rank = torch.randn(3, 256, 8, generator=gen) @ torch.randn(3, 8, 64, generator=gen)
    for g in (decaying, low_rank + 1e-3 * torch.randn(3, 256, 64, generator=gen)):
        ref = newton_schulz(g.double(), dtype=torch.float64)
        out = gram_newton_schulz([g])[0]
        assert torch.equal(out, gram_newton_schulz([g], restart=0)[0])  # float32: no restart by default
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-3  # measured 2e-4 at worst
        assert not torch.equal(out, gram_newton_schulz([g], restart=2)[0])  # the restart does change rounding


def test_muon_matches_torch_muon_up_to_its_bfloat16_iteration():
    torch.manual_seed(0)
    w0 = torch.randn(48, 16)
    ours, ref = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    a = Muon([ours], lr=0.02, weight_decay=0.1)
    b = torch.optim.Muon([ref], lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    for i in range(3):
        g = torch.randn(48, 16, generator=torch.Generator().manual_seed(i))
        ours.grad, ref.grad = g.clone(), g.clone()
        a.step()
        b.step()
    upd_ours, upd_ref = ours.detach() - w0, ref.detach() - w0
    # torch iterates in bf16 (8 bits of mantissa): the updates agree to ~1 % of their size
    assert (upd_ours - upd_ref).norm() / upd_ref.norm() < 0.02
    assert upd_ref.norm() > 0.1  # the comparison means something


def _muon_one_at_a_time(params, grads, lr=0.02, wd=0.1, mu=0.95):
    """The update of Muon's docstring, one matrix at a time, float32 (the reference for the stacked step)."""
    bufs = [torch.zeros_like(p) for p in params]
    for gs in grads:
        for p, b, g in zip(params, bufs, gs):
            b.mul_(mu).add_(g)
            p.mul_(1 - lr * wd).add_(newton_schulz(g + mu * b), alpha=-lr * 0.2 * max(p.shape) ** 0.5)


def test_stacked_step_equals_one_matrix_at_a_time_and_bf16_stays_close():
    gen = torch.Generator().manual_seed(3)
    shapes = [(16, 48), (16, 48), (48, 16), (16, 16), (16, 48)]  # two shapes repeat: stacked together
    w0 = [torch.randn(*s, generator=gen) for s in shapes]
    grads = [[torch.randn(*s, generator=gen) for s in shapes] for _ in range(3)]
    ref = [w.clone() for w in w0]
    _muon_one_at_a_time(ref, grads)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        ps = [torch.nn.Parameter(w.clone()) for w in w0]
        opt = Muon(ps, lr=0.02, weight_decay=0.1, ns_dtype=dtype)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.clone()
            opt.step()
        out[dtype] = [p.detach() for p in ps]
    for a, b in zip(out[torch.float32], ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b, w in zip(out[torch.bfloat16], ref, w0):  # bf16 keeps 8 bits: ~1 % of the update
        assert (a - b).norm() / (b - w).norm() < 0.03 and a.dtype == torch.float32
    stack = torch.stack([g for g in grads[0][:2]])
    torch.testing.assert_close(newton_schulz(stack), torch.stack([newton_schulz(g) for g in grads[0][:2]]),
                               atol=1e-6, rtol=1e-5)
    assert newton_schulz(stack, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_update_precision_follows_the_run_dtype():
    from depthlab.training.optimization import set_update_precision

    _, opt = muon_model_and_optimizer(0)
    assert opt.muon.ns_dtype == torch.float32
    set_update_precision(opt, True)
    assert opt.muon.ns_dtype == torch.bfloat16
    set_update_precision(opt, False)
    assert opt.muon.ns_dtype == torch.float32
    set_update_precision(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]), True)  # nothing to set


def test_muon_refuses_a_vector():
    with pytest.raises(ValueError, match="2-D weights only"):
        Muon([torch.nn.Parameter(torch.zeros(4))])


def test_state_dict_round_trip_continues_identically_and_an_adamw_state_is_refused():
    m1, o1 = muon_model_and_optimizer(1)
    x = torch.randint(0, 11, (2, 8))

    def step(m, o):
        m(x, x)[1].backward()
        o.step()
        o.zero_grad()

    step(m1, o1)
    m2, o2 = muon_model_and_optimizer(1)
    m2.load_state_dict(m1.state_dict())
    buf = io.BytesIO()
    torch.save(o1.state_dict(), buf)  # as a checkpoint does: a copy, not o1's own tensors
    buf.seek(0)
    o2.load_state_dict(torch.load(buf, weights_only=True))
    step(m1, o1)
    step(m2, o2)
    for (n, p), q in zip(m1.named_parameters(), m2.parameters()):
        assert torch.equal(p, q), n
    with pytest.raises(ValueError, match="not a Muon"):
        o2.load_state_dict(torch.optim.AdamW(m2.parameters()).state_dict())


def test_a_state_loaded_into_a_stepped_muon_replaces_its_stacked_momentum():
    # Muon keeps each shape's momentum as one stack, the per-parameter state entries its views: a state
    # loaded into a Muon that has stepped since must be used, not the stack it had made
    gen = torch.Generator().manual_seed(4)
    shapes = [(16, 48), (16, 48), (48, 16)]
    grads = [[torch.randn(*s, generator=gen) for s in shapes] for _ in range(5)]
    w0 = [torch.randn(*s, generator=gen) for s in shapes]

    def step(ps, opt, gs):
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        opt.step()

    p1 = [torch.nn.Parameter(w.clone()) for w in w0]
    o1 = Muon(p1, lr=0.02, weight_decay=0.1)
    step(p1, o1, grads[0])
    buf = io.BytesIO()
    torch.save({"w": [p.detach().clone() for p in p1], "opt": o1.state_dict()}, buf)
    for gs in grads[1:4]:
        step(p1, o1, gs)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    with torch.no_grad():
        for p, w in zip(p1, saved["w"]):
            p.copy_(w)
    o1.load_state_dict(saved["opt"])
    p2 = [torch.nn.Parameter(w.clone()) for w in saved["w"]]
    o2 = Muon(p2, lr=0.02, weight_decay=0.1)
    o2.load_state_dict(saved["opt"])
    step(p1, o1, grads[4])
    step(p2, o2, grads[4])
    for a, b in zip(p1, p2):
        assert torch.equal(a, b)
    bufs = [s["momentum_buffer"] for s in o1.state_dict()["state"].values()]
    assert len(bufs) == 3 and all(torch.equal(b, o2.state[q]["momentum_buffer"]) for b, q in zip(bufs, p2))


def test_two_param_groups_with_one_shape_keep_their_own_momentum_stacks():
    gen = torch.Generator().manual_seed(8)
    w0 = [torch.randn(16, 48, generator=gen) for _ in range(3)]
    grads = [[torch.randn(16, 48, generator=gen) for _ in range(3)] for _ in range(3)]
    one = [torch.nn.Parameter(w.clone()) for w in w0]
    two = [torch.nn.Parameter(w.clone()) for w in w0]
    a = Muon(one, lr=0.02, weight_decay=0.1)
    b = Muon([{"params": two[:1]}, {"params": two[1:]}], lr=0.02, weight_decay=0.1)
    for gs in grads:
        for p, q, g in zip(one, two, gs):
            p.grad, q.grad = g.clone(), g.clone()
        a.step()
        b.step()
    for p, q in zip(one, two):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-6)
    assert len(b._stacks) == 2 and all(torch.equal(a.state[p]["momentum_buffer"], b.state[q]["momentum_buffer"])
                                       for p, q in zip(one, two))
