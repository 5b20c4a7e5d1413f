"""The PKI on template.yaml: the pool CAs' keys never leave KMS. Functions may sign only with keys
tagged as this stack's, may create only tagged P-256 signing keys, and no function can read or
write a secret any more."""

from __future__ import annotations

import json
from typing import Any

from tests.support.template import TEMPLATE, of_type

FUNCTIONS = of_type("AWS::Serverless::Function")
STACK_TAG = {"aws:ResourceTag/joinplane:stack": {"Ref": "AWS::StackName"}}
# Every key operation: this stack's tag, on a P-256 signing key (what a CA key is, and all it is).
CA_KEY = {"StringEquals": {**STACK_TAG, "kms:KeySpec": "ECC_NIST_P256", "kms:KeyUsage": "SIGN_VERIFY"}}
TAG_KEYS = ["joinplane:stack", "joinplane:tenant", "joinplane:pool", "joinplane:ca"]
ALIAS_ARN = "arn:${AWS::Partition}:kms:${AWS::Region}:${AWS::AccountId}:alias/joinplane/${AWS::StackName}/*"
KEY_ARN = {"Fn::Sub": "arn:${AWS::Partition}:kms:${AWS::Region}:${AWS::AccountId}:key/*"}


def statements(function: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for policy in function["Properties"].get("Policies", []):
        if isinstance(policy, dict):
            found += policy.get("Statement", [])
    return found


def actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def granting(function: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in statements(function) if action in actions(s)]


def test_no_function_has_any_secrets_manager_action_nor_a_ca_secret_setting() -> None:
    # Given the whole template as text (policies, variables, managed policy names)
    text = json.dumps(TEMPLATE)
    # Then no function can touch a secret, and no setting names one
    assert "secretsmanager:" not in text.lower()
    assert "CA_SECRET_PREFIX" not in text
    assert not any(
        "SecretsManager" in json.dumps(f["Properties"].get("Policies", [])) for f in FUNCTIONS.values()
    )


def test_the_functions_that_issue_certificates_sign_only_with_this_stacks_tagged_keys() -> None:
    for name in ("MachineJoinFunction", "CertificateAuthoritiesFunction"):
        signing = granting(FUNCTIONS[name], "kms:Sign")
        assert signing, name
        for statement in signing:
            assert statement["Resource"] == KEY_ARN, name
            assert statement["Condition"] == CA_KEY, name
            assert "kms:Sign" in actions(statement) and "kms:GetPublicKey" in actions(statement)


def test_keys_are_created_only_as_tagged_p256_signing_keys_and_aliased_under_the_stack() -> None:
    for name in ("MachineJoinFunction", "CertificateAuthoritiesFunction"):
        (create,) = granting(FUNCTIONS[name], "kms:CreateKey")
        assert create["Condition"] == {
            "StringEquals": {
                "aws:RequestTag/joinplane:stack": {"Ref": "AWS::StackName"},
                "kms:KeySpec": "ECC_NIST_P256",
                "kms:KeyUsage": "SIGN_VERIFY",
            }
        }
        # Tagging (which CreateKey's Tags need, on key/*) sets only this stack's four tags
        (tagging,) = granting(FUNCTIONS[name], "kms:TagResource")
        assert tagging["Condition"] == {
            "StringEquals": {"aws:RequestTag/joinplane:stack": {"Ref": "AWS::StackName"}},
            "ForAllValues:StringEquals": {"aws:TagKeys": TAG_KEYS},
        }
        aliases = granting(FUNCTIONS[name], "kms:CreateAlias")
        resources = [s["Resource"] for s in aliases]
        assert {"Fn::Sub": ALIAS_ARN} in resources
        assert all(s.get("Condition") == CA_KEY for s in aliases if s["Resource"] == KEY_ARN)


def test_only_the_ca_functions_revocation_and_the_retention_job_touch_kms_keys_and_none_may_decrypt() -> None:
    touching = {
        name
        for name, function in FUNCTIONS.items()
        if any(a.startswith("kms:") for s in statements(function) for a in actions(s))
    }
    assert touching == {
        "MachineJoinFunction",
        "CertificateAuthoritiesFunction",
        "RetentionFunction",
        "MachinesFunction",
    }
    # A revocation re-signs its CA's CRL: MachinesFunction signs with this stack's keys, nothing else
    (crl_signing,) = [
        s for s in statements(FUNCTIONS["MachinesFunction"]) if any(a.startswith("kms:") for a in actions(s))
    ]
    assert actions(crl_signing) == {"kms:Sign"} and crl_signing["Condition"] == CA_KEY
    (deletion,) = granting(FUNCTIONS["RetentionFunction"], "kms:ScheduleKeyDeletion")
    assert deletion["Condition"] == CA_KEY
    assert actions(deletion) == {"kms:ScheduleKeyDeletion", "kms:ListResourceTags"}
    # And no other function may delete a key (tests/iam tries it with each one's statements)
    deleting = [name for name, function in FUNCTIONS.items() if granting(function, "kms:ScheduleKeyDeletion")]
    assert deleting == ["RetentionFunction"]


def test_every_function_names_the_alias_prefix_and_stack_tag_the_ca_code_reads() -> None:
    variables = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["KMS_ALIAS_PREFIX"] == {"Fn::Sub": "alias/joinplane/${AWS::StackName}"}
    assert variables["KMS_STACK_TAG"] == {"Ref": "AWS::StackName"}
