"""The ValidatingAdmissionPolicy, evaluated with a real CEL evaluator against AdmissionRequest
fixtures: forged identities are refused, the operator's ServiceAccount may record anyone, and
honest kubectl users can create, answer and cancel their own Runs."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

import check
import vap
from check import NAMESPACE, one, render

OPERATOR = f"system:serviceaccount:{NAMESPACE}:runway"
ALICE = {"username": "alice", "uid": "u-alice", "groups": ["dev", "system:authenticated"]}
BOB = {"username": "bob", "uid": "u-bob", "groups": ["ops", "system:authenticated"]}
OPERATOR_USER = {"username": OPERATOR, "uid": "u-sa", "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]}


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return one(render(), "ValidatingAdmissionPolicy")


def run(**spec: Any) -> dict[str, Any]:
    """A Run as kubectl would send it; checked against the Run CRD so fixtures stay realistic."""
    obj = {
        "apiVersion": "runway.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "approve-deploy-abc", "namespace": "team-a"},
        "spec": {"workflowRef": {"name": "approve-deploy"}, "arguments": {"service": "api"}, **spec},
    }
    assert check.validate_runway_object(obj) == []
    return obj


def alices_run(**extra: Any) -> dict[str, Any]:
    return run(requestedBy={"username": "alice", "uid": "u-alice", "groups": ["dev"]}, **extra)


def answered(obj: dict[str, Any], key: str, **answer: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["spec"].setdefault("inputResponses", {})[key] = {"action": "accept", "content": {"approve": True}, **answer}
    assert check.validate_runway_object(new) == []
    return new


def cancelled(obj: dict[str, Any], **cancel: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["spec"]["cancel"] = {"reason": "not needed", "requestedAt": "2026-01-01T00:00:00Z", **cancel}
    assert check.validate_runway_object(new) == []
    return new


def denied(verdict: vap.Verdict, pattern: str) -> bool:
    """Denied by a validation that evaluated to false (not by an evaluation error), whose message
    matches `pattern`."""
    assert not any("evaluation error" in m for m in verdict.messages), verdict.messages
    return not verdict.allowed and any(re.search(pattern, m) for m in verdict.messages)


# --- the policy's shape ------------------------------------------------------------------------------


def test_policy_matches_run_writes_and_is_bound_to_deny(policy: dict[str, Any]) -> None:
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["runway.dev"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": ["runs"]}
    ]
    binding = one(render(), "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    for v in spec["validations"]:
        assert v["message"] and "\n" not in v["message"]
        assert v["reason"] == "Forbidden"


def test_policy_uses_only_what_the_api_server_provides(policy: dict[str, Any]) -> None:
    expressions = [v["expression"] for v in policy["spec"]["variables"] + policy["spec"]["validations"]]
    expressions += [v["messageExpression"] for v in policy["spec"]["validations"]]
    for e in expressions:
        code = re.sub(r"'[^']*'", "''", e)  # string literals are no references
        for root in re.findall(r"(?<![.\w])([A-Za-z_]\w*)\.", code):
            assert root in vap.ROOTS, f"{root} in {e}"


def test_operator_identity_follows_release_namespace_and_service_account() -> None:
    p = one(render(check.all_options()), "ValidatingAdmissionPolicy")
    sa = f"system:serviceaccount:{NAMESPACE}:runway-all-operator"
    forged = run(requestedBy={"username": "mallory"})
    assert vap.create(p, {"username": sa, "groups": []}, forged).allowed
    assert not vap.create(p, {"username": OPERATOR, "groups": []}, forged).allowed
    p = one(render({"serviceAccount": {"create": False, "name": "shared-sa"}}), "ValidatingAdmissionPolicy")
    assert vap.create(p, {"username": f"system:serviceaccount:{NAMESPACE}:shared-sa", "groups": []}, forged).allowed


# --- CREATE: requestedBy ---------------------------------------------------------------------------


def test_create_with_own_identity_is_allowed(policy: dict[str, Any]) -> None:
    assert vap.create(policy, ALICE, alices_run()).allowed
    assert vap.create(policy, ALICE, run(requestedBy={"username": "alice", "uid": "u-alice"})).allowed
    no_uid = {"username": "carl", "groups": ["dev"]}
    assert vap.create(policy, no_uid, run(requestedBy={"username": "carl"})).allowed


def test_create_without_ones_uid_is_denied(policy: dict[str, Any]) -> None:
    # The owner rule compares uids when both are known: leaving yours out would make the Run
    # look like any principal's of that name.
    assert denied(vap.create(policy, ALICE, run(requestedBy={"username": "alice"})), "uid u-alice")


def test_create_with_forged_requested_by_is_denied(policy: dict[str, Any]) -> None:
    for forged in [{"username": "bob"}, {"username": "bob", "groups": ["dev"]}, {"username": "bob", "groups": ["ops"]}]:
        verdict = vap.create(policy, ALICE, run(requestedBy=forged))
        assert denied(verdict, r"spec\.requestedBy must be you: username alice"), forged


def test_create_claiming_foreign_groups_or_uid_is_denied(policy: dict[str, Any]) -> None:
    assert denied(vap.create(policy, ALICE, run(requestedBy={"username": "alice", "groups": ["ops"]})), "requestedBy")
    assert denied(vap.create(policy, ALICE, run(requestedBy={"username": "alice", "uid": "u-bob"})), "requestedBy")


def test_create_without_requested_by_is_denied(policy: dict[str, Any]) -> None:
    assert denied(vap.create(policy, ALICE, run()), "requestedBy")


def test_operator_service_account_may_record_any_requester(policy: dict[str, Any]) -> None:
    assert vap.create(policy, OPERATOR_USER, run(requestedBy={"username": "bob", "uid": "u-bob", "groups": ["ops"]})).allowed


def test_a_look_alike_service_account_is_not_the_operator(policy: dict[str, Any]) -> None:
    for username in ["system:serviceaccount:other:runway", f"system:serviceaccount:{NAMESPACE}:runway-x", "runway"]:
        user = {"username": username, "groups": ["system:authenticated"]}
        assert not vap.create(policy, user, run(requestedBy={"username": "bob"})).allowed, username


def test_create_with_prefilled_answers_or_cancel_is_checked_too(policy: dict[str, Any]) -> None:
    forged_answer = answered(alices_run(), "approval.decision", answeredBy="bob", answeredByGroups=["ops"])
    assert denied(vap.create(policy, ALICE, forged_answer), "inputResponses")
    forged_cancel = cancelled(alices_run(), requestedBy="bob")
    assert denied(vap.create(policy, ALICE, forged_cancel), "spec.cancel")
    honest = cancelled(answered(alices_run(), "approval.decision", answeredBy="alice", answeredByGroups=["dev"]), requestedBy="alice")
    assert vap.create(policy, ALICE, honest).allowed


# --- UPDATE: inputResponses ------------------------------------------------------------------------


def test_answer_as_yourself_is_allowed(policy: dict[str, Any]) -> None:
    old = alices_run()
    new = answered(old, "approval.decision", answeredBy="bob", answeredByGroups=["ops"], answeredAt="2026-01-01T00:00:00Z")
    assert vap.update(policy, BOB, old, new).allowed
    assert vap.update(policy, BOB, old, answered(old, "approval.decision", answeredBy="bob")).allowed


def test_forged_answered_by_is_denied(policy: dict[str, Any]) -> None:
    old = alices_run()
    for forged in [
        answered(old, "approval.decision", answeredBy="bob"),
        answered(old, "approval.decision", answeredBy="bob", answeredByGroups=["dev"]),
        answered(old, "approval.decision", answeredBy="bob", answeredByGroups=["ops"]),
    ]:
        verdict = vap.update(policy, ALICE, old, forged)
        assert denied(verdict, r"new spec\.inputResponses entry must have answeredBy alice"), forged


def test_answer_claiming_a_group_you_are_not_in_is_denied(policy: dict[str, Any]) -> None:
    old = alices_run()
    assert denied(vap.update(policy, ALICE, old, answered(old, "approval.decision", answeredBy="alice", answeredByGroups=["ops"])), "inputResponses")


def test_answer_without_answered_by_is_denied(policy: dict[str, Any]) -> None:
    old = alices_run()
    assert denied(vap.update(policy, BOB, old, answered(old, "approval.decision")), "inputResponses")


def test_only_new_answers_are_checked(policy: dict[str, Any]) -> None:
    # An answer the operator recorded for someone else stays; Bob adds his own next to it.
    old = answered(alices_run(), "form.summary", answeredBy="carol", answeredByGroups=["writers"])
    new = answered(old, "form.risk", answeredBy="bob", answeredByGroups=["ops"])
    assert vap.update(policy, BOB, old, new).allowed
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert vap.update(policy, ALICE, old, relabelled).allowed
    forged = answered(old, "form.risk", answeredBy="carol")
    assert not vap.update(policy, BOB, old, forged).allowed


def test_operator_service_account_may_record_any_answer(policy: dict[str, Any]) -> None:
    old = alices_run()
    new = answered(old, "approval.decision", answeredBy="bob", answeredByGroups=["ops"])
    assert vap.update(policy, OPERATOR_USER, old, new).allowed


# --- UPDATE: cancel --------------------------------------------------------------------------------


def test_cancel_as_yourself_is_allowed(policy: dict[str, Any]) -> None:
    old = alices_run()
    assert vap.update(policy, ALICE, old, cancelled(old, requestedBy="alice")).allowed


def test_forged_or_anonymous_cancel_is_denied(policy: dict[str, Any]) -> None:
    old = alices_run()
    assert denied(vap.update(policy, ALICE, old, cancelled(old, requestedBy="bob")), r"spec\.cancel must have requestedBy alice")
    assert denied(vap.update(policy, ALICE, old, cancelled(old)), "spec.cancel")


def test_an_existing_cancel_is_not_rechecked(policy: dict[str, Any]) -> None:
    old = cancelled(alices_run(), requestedBy="mcp-user", reason="mcp-request-cancelled")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    assert vap.update(policy, BOB, old, new).allowed


def test_operator_service_account_may_record_any_canceller(policy: dict[str, Any]) -> None:
    old = alices_run()
    assert vap.update(policy, OPERATOR_USER, old, cancelled(old, requestedBy="bob")).allowed


# --- UPDATE: pause and resume ----------------------------------------------------------------------


def paused(obj: dict[str, Any], paused: bool = True, **request: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["spec"]["pause"] = {"paused": paused, "requestedAt": "2026-01-01T00:00:00Z", **request}
    return new


def test_pause_and_resume_as_yourself_are_allowed(policy: dict[str, Any]) -> None:
    old = alices_run()
    first = paused(old, requestedBy="alice")
    assert vap.update(policy, ALICE, old, first).allowed
    assert vap.update(policy, BOB, first, paused(first, False, requestedBy="bob", requestedAt="2026-01-01T00:01:00Z")).allowed


def test_a_forged_or_anonymous_pause_or_resume_is_denied(policy: dict[str, Any]) -> None:
    old = alices_run()
    assert denied(vap.update(policy, ALICE, old, paused(old, requestedBy="bob")), r"spec\.pause must have requestedBy alice")
    assert denied(vap.update(policy, ALICE, old, paused(old)), "spec.pause")
    first = paused(old, requestedBy="alice")
    # Resuming in someone else's name, or changing only the reason of their request, is a new request.
    assert denied(vap.update(policy, BOB, first, paused(first, False, requestedBy="alice")), "spec.pause")
    assert denied(vap.update(policy, BOB, first, paused(first, requestedBy="alice", reason="mine now")), "spec.pause")
    assert denied(vap.create(policy, ALICE, paused(alices_run(), requestedBy="bob")), "spec.pause")


def test_an_unchanged_pause_is_not_rechecked_and_the_operator_may_record_anyone(policy: dict[str, Any]) -> None:
    old = paused(alices_run(), requestedBy="alice")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    assert vap.update(policy, BOB, old, new).allowed
    assert vap.update(policy, OPERATOR_USER, old, paused(old, False, requestedBy="bob")).allowed


# --- the evaluator itself ---------------------------------------------------------------------------


def test_an_evaluation_error_denies() -> None:
    broken = {
        "spec": {
            "variables": [{"name": "v", "expression": "object.spec.nope.deeper"}],
            "validations": [{"expression": "variables.v == 1", "message": "broken"}],
        }
    }
    assert not vap.create(broken, ALICE, alices_run()).allowed



# --- the MutatingAdmissionPolicy that fills in requestedBy ---------------------------------------


def requester_policy(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return check.find(render(values), "MutatingAdmissionPolicy")


def test_the_requester_policy_is_rendered_where_asked_or_served() -> None:
    # Offline nothing says the cluster serves the API: `auto` renders nothing.
    assert requester_policy() == []
    assert len(requester_policy({"admissionPolicy": {"fillRequester": True}})) == 1
    assert requester_policy({"admissionPolicy": {"fillRequester": True, "enabled": False}}) == []
    assert requester_policy({"admissionPolicy": {"fillRequester": False}}) == []


def test_the_requester_policy_touches_only_runs_created_without_a_requester() -> None:
    (policy,) = requester_policy({"admissionPolicy": {"fillRequester": True}})
    conditions = [c["expression"] for c in policy["spec"]["matchConditions"]]

    def matches(user: dict[str, Any], obj: dict[str, Any]) -> bool:
        request = {"operation": "CREATE", "userInfo": user}
        checks = {"spec": {"validations": [{"expression": e, "message": e} for e in conditions]}}
        return vap.evaluate(checks, request, obj, None).allowed

    bare = run()
    bare["spec"].pop("requestedBy", None)
    assert matches(ALICE, bare)
    assert not matches(ALICE, run(requestedBy={"username": "alice", "uid": "u-alice"}))
    assert not matches(OPERATOR_USER, bare)
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
