"""Adam on torch's fused kernel, without `torch.optim`.

Every `torch.optim` optimizer imports `torch._dynamo` when it is built (its methods are
wrapped to keep the compiler out): 1.3 s of a training run's fixed cost on the 2-core
build host, paid by every `envad train` process before its first step. `FusedAdam` runs
the same kernel `torch.optim.Adam(..., fused=True)` runs (`torch._fused_adam_`, on CPU
and CUDA) with the same arguments and the same lazily created state, so its updates are
identical to the bit; its `state_dict` has `torch.optim.Adam`'s layout, so checkpoints
written by either load into the other (tests/training/test_optim.py checks both).

Only what training uses: one or more parameter groups, a learning rate set per group
between steps (`param_groups[i]["lr"]`, the schedules'), L2 weight decay, no amsgrad.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

#: the group settings torch.optim.Adam(fused=True) records, in its state dicts too
_GROUP_DEFAULTS: dict[str, Any] = {
    "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False,
    "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
    "fused": True, "decoupled_weight_decay": False}


class FusedAdam:
    """`torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True)`."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float,
                 weight_decay: float = 0.0):
        given: list[Any] = list(params)
        if not given:
            raise ValueError("FusedAdam got an empty parameter list")
        groups: list[dict[str, Any]] = (given if isinstance(given[0], dict)
                                        else [{"params": given}])
        self.param_groups: list[dict[str, Any]] = []
        for group in groups:
            params_of_group = list(group["params"])
            for param in params_of_group:
                if not param.is_floating_point():
                    raise ValueError(f"FusedAdam needs floating-point parameters, got "
                                     f"{param.dtype}")
            self.param_groups.append({**_GROUP_DEFAULTS, "lr": lr,
                                      "weight_decay": weight_decay,
                                      **{k: v for k, v in group.items() if k != "params"},
                                      "params": params_of_group})
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        for group in self.param_groups:
            by_place: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("FusedAdam does not take sparse gradients")
                state = self.state.get(param)
                if not state:
                    state = self.state[param] = {
                        "step": torch.zeros((), dtype=torch.float32, device=param.device),
                        "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(param,
                                                       memory_format=torch.preserve_format)}
                lists = by_place.setdefault((param.device, param.dtype), [[], [], [], [], []])
                for values, value in zip(lists, (param, param.grad, state["exp_avg"],
                                                 state["exp_avg_sq"], state["step"]),
                                         strict=True):
                    values.append(value)
            beta1, beta2 = group["betas"]
            for params, grads, exp_avgs, exp_avg_sqs, steps in by_place.values():
                torch._foreach_add_(steps, 1)
                torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps,
                                   amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2,
                                   weight_decay=group["weight_decay"], eps=group["eps"],
                                   maximize=False, grad_scale=None, found_inf=None)

    def state_dict(self) -> dict[str, Any]:
        """`torch.optim.Optimizer.state_dict`'s layout: parameters numbered across the
        groups in order, state keyed by number (tensors not copied)."""
        numbers: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for param in group["params"]:
                numbers.setdefault(id(param), len(numbers))
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": [numbers[id(p)] for p in group["params"]]})
        state = {numbers[id(param)]: values for param, values in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Load a state dict of this class or of `torch.optim.Adam` for the same
        parameters (group sizes must match); moments move to their parameter's device
        and dtype, the step count to float32 on it, as the fused kernel needs."""
        saved_groups = saved["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"])
                for a, b in zip(saved_groups, self.param_groups, strict=True)):
            raise ValueError("the saved optimizer state holds other parameter groups")
        by_number = {number: param
                     for saved_group, group in zip(saved_groups, self.param_groups,
                                                   strict=True)
                     for number, param in zip(saved_group["params"], group["params"],
                                              strict=True)}
        self.state = {}
        for number, values in saved["state"].items():
            param = by_number[int(number)]
            self.state[param] = {
                key: (value.to(dtype=torch.float32, device=param.device) if key == "step"
                      else value.to(dtype=param.dtype, device=param.device))
                for key, value in values.items()}
        self.param_groups = [{**{k: v for k, v in saved_group.items() if k != "params"},
                              "params": group["params"]}
                             for saved_group, group in zip(saved_groups, self.param_groups,
                                                           strict=True)]
