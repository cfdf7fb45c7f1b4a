"""Evaluate a rendered ValidatingAdmissionPolicy the way the API server does, with a real CEL
evaluator (cel-python): variables in order, then every validation; a validation that is false,
or that fails to evaluate (failurePolicy: Fail), denies the request with its message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

# The variables the API server gives a ValidatingAdmissionPolicy without params; the policy may
# use no others (no `params`, `authorizer` or `namespaceObject`).
ROOTS = {"object", "oldObject", "request", "variables"}


@dataclass
class Verdict:
    """What the policy decided."""

    allowed: bool
    messages: list[str]


def _program(env: celpy.Environment, expression: str) -> Any:
    return env.program(env.compile(expression))


def evaluate(policy: dict[str, Any], request: dict[str, Any], obj: Any, old: Any) -> Verdict:
    """Admit or deny one request (`request` is the AdmissionRequest: operation, userInfo)."""
    env = celpy.Environment()
    variables: dict[str, Any] = {}
    activation = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(request),
    }
    spec = policy["spec"]
    for var in spec.get("variables", []):
        activation["variables"] = celtypes.MapType({celtypes.StringType(k): v for k, v in variables.items()})
        try:
            value = _program(env, var["expression"]).evaluate(activation)
        except celpy.CELEvalError as e:
            # The API server evaluates variables lazily: an error surfaces only in a validation
            # that uses the variable. CEL error values propagate the same way here.
            value = e
        variables[var["name"]] = value
    activation["variables"] = celtypes.MapType({celtypes.StringType(k): v for k, v in variables.items()})

    messages = []
    for validation in spec["validations"]:
        try:
            result = _program(env, validation["expression"]).evaluate(activation)
        except celpy.CELEvalError as e:  # failurePolicy: Fail
            result = e
        if result is True or result == celtypes.BoolType(True):
            continue
        message = validation.get("message", "")
        if "messageExpression" in validation:
            try:
                message = str(_program(env, validation["messageExpression"]).evaluate(activation))
            except celpy.CELEvalError:
                pass
        if isinstance(result, Exception):
            message = f"{message} (evaluation error: {result})"
        messages.append(message)
    return Verdict(allowed=not messages, messages=messages)


def create(policy: dict[str, Any], user: dict[str, Any], obj: dict[str, Any]) -> Verdict:
    """A CREATE of `obj` by `user`."""
    return evaluate(policy, {"operation": "CREATE", "userInfo": user}, obj, None)


def update(policy: dict[str, Any], user: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> Verdict:
    """An UPDATE from `old` to `new` by `user`."""
    return evaluate(policy, {"operation": "UPDATE", "userInfo": user}, new, old)
