"""The Hessian measures (fedapp/core/hessian.py) on a least-squares model, whose Hessian is known exactly:
for L(w, b) = mean_i (x_i . w + b - y_i)^2 / 2 it is A^T A / N with A = [X, 1]."""

import torch

from fedapp.core.hessian import hvp, top_eigenvalue, trace


def half_squared_error(model, x, y):
    return 0.5 * ((model(x).squeeze(1) - y) ** 2).mean()


def setting(scales: list[float], n: int = 40):
    torch.manual_seed(0)
    x = torch.randn(n, len(scales)) * torch.tensor(scales)
    y = torch.randn(n)
    model = torch.nn.Linear(len(scales), 1)
    a = torch.cat([x, torch.ones(n, 1)], 1).double()
    return model, x, y, a.T @ a / n


def test_hvp_is_the_exact_hessian_times_v_over_any_batching():
    model, x, y, hessian = setting([1.0, 2.0, 0.5, 3.0])
    v = [torch.randn(4).view(1, 4), torch.randn(1)]
    want = hessian @ torch.cat([t.flatten() for t in v]).double()
    for batches in ([(x, y)], [(x[:13], y[:13]), (x[13:], y[13:])]):  # unequal batches weigh by their size
        got = torch.cat([t.flatten() for t in hvp(model, batches, v, half_squared_error)]).double()
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_top_eigenvalue_and_trace_of_a_known_hessian():
    model, x, y, hessian = setting([1.0, 2.0, 0.5, 3.0])
    eigs = torch.linalg.eigvalsh(hessian)
    top = top_eigenvalue(model, [(x, y)], iters=500, tol=1e-9, loss=half_squared_error)
    assert abs(top - eigs[-1].item()) <= 1e-3 * eigs[-1].item()
    est = trace(model, [(x, y)], probes=3000, loss=half_squared_error)
    assert abs(est - torch.trace(hessian).item()) <= 0.05 * torch.trace(hessian).item()


def test_hutchinson_is_exact_on_a_diagonal_hessian():
    # z_i^2 = 1 for a Rademacher z, so z.Hz = tr H for every probe when H is diagonal
    n = 4
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0], [0.0, -3.0]])  # orthogonal columns, no bias
    model = torch.nn.Linear(2, 1, bias=False)
    assert abs(trace(model, [(x, torch.zeros(n))], probes=3, loss=half_squared_error) - (2 + 18) / n) < 1e-6
    assert abs(top_eigenvalue(model, [(x, torch.zeros(n))], loss=half_squared_error) - 18 / n) < 1e-3
