"""What each DynamoDB and KMS call of a function asks IAM for: the requests (action, resource,
condition keys) IAM authorizes one by one before the call runs.

- DynamoDB: a transaction is authorized action by action (Put, Update, Delete as PutItem,
  UpdateItem, DeleteItem, a ConditionCheck as ConditionCheckItem, with
  `dynamodb:EnclosingOperation` = TransactWriteItems); `dynamodb:LeadingKeys` is the partition key
  value (of the index, for a query of an index; every key's, for BatchGetItem);
  `dynamodb:Attributes` the top-level attribute names a write names (the item's, and those of its
  update and condition expressions: IAM cannot tell an attribute read by a condition from one
  written); `dynamodb:ReturnValues`.
- KMS: `aws:ResourceTag/<key>`, `kms:KeySpec`, `kms:KeyUsage` of the key a call names (read by
  `iam.KeyFacts`); `aws:RequestTag/<key>`, `aws:TagKeys` of a CreateKey (which also needs
  kms:TagResource for its tags); a CreateAlias needs the alias and the key.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .iam_policy import ContextValue, Request
from .template import Names

if TYPE_CHECKING:
    from .iam import KeyFacts

_WORD = re.compile(r"(?<![.\w#:\[])(#?[A-Za-z_][\w-]*)(\s*\()?")
_KEYWORDS = frozenset({"and", "or", "not", "between", "in", "set", "remove", "add", "delete"})


def expression_attributes(expression: str | None, names: Mapping[str, str] | None) -> set[str]:
    """The top-level attribute names an expression names (placeholders resolved)."""
    if not expression:
        return set()
    return {(names or {}).get(word, word) for word in _expression_words(expression)}


@functools.lru_cache(maxsize=4096)
def _expression_words(expression: str) -> frozenset[str]:
    """The words of an expression that name attributes (`#placeholders` unresolved): the dal
    writes a few dozen expressions, each parsed once."""
    return frozenset(
        word for word, call in _WORD.findall(expression) if not call and word.lower() not in _KEYWORDS
    )


# The partition key attribute of the table and of each index (template.yaml's key schema).
PARTITION_KEYS = {None: "pk", "gsi1": "gsi1pk", "gsi2": "gsi2pk", "gsi3": "gsi3pk"}


def _scalar(value: Mapping[str, Any]) -> str:
    (kind, raw), *_ = value.items()
    return str(raw) if kind in ("S", "N") else repr(raw)


def _write_context(
    operation: str, action: Mapping[str, Any], pk: str, enclosing: str | None
) -> dict[str, ContextValue]:
    names = action.get("ExpressionAttributeNames")
    attributes = set(action.get("Item") or {})
    attributes |= expression_attributes(action.get("UpdateExpression"), names)
    attributes |= expression_attributes(action.get("ConditionExpression"), names)
    context: dict[str, ContextValue] = {"dynamodb:LeadingKeys": (pk,)}
    if attributes:
        context["dynamodb:Attributes"] = tuple(sorted(attributes))
    if action.get("ReturnValues"):
        context["dynamodb:ReturnValues"] = str(action["ReturnValues"])
    if enclosing:
        context["dynamodb:EnclosingOperation"] = enclosing
    return context


def dynamodb_requests(operation: str, params: Mapping[str, Any], names: Names) -> list[Request]:
    def table_arn(table: str) -> str:
        return f"arn:aws:dynamodb:{names.region}:{names.account}:table/{table}"

    def pk_of(action: Mapping[str, Any]) -> str:
        key = action.get("Item") or action.get("Key") or {}
        return _scalar(key["pk"]) if "pk" in key else ""

    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        arn = table_arn(params["TableName"])
        if operation == "GetItem":
            return [Request(f"dynamodb:{operation}", arn, {"dynamodb:LeadingKeys": (pk_of(params),)})]
        return [Request(f"dynamodb:{operation}", arn, _write_context(operation, params, pk_of(params), None))]
    if operation == "TransactWriteItems":
        kinds = {
            "Put": "PutItem",
            "Update": "UpdateItem",
            "Delete": "DeleteItem",
            "ConditionCheck": "ConditionCheckItem",
        }
        requests = []
        for entry in params["TransactItems"]:
            ((kind, action),) = entry.items()
            requests.append(
                Request(
                    f"dynamodb:{kinds[kind]}",
                    table_arn(action["TableName"]),
                    _write_context(kinds[kind], action, pk_of(action), "TransactWriteItems"),
                )
            )
        return requests
    if operation == "BatchGetItem":
        return [
            Request(
                "dynamodb:BatchGetItem",
                table_arn(table),
                {"dynamodb:LeadingKeys": tuple(sorted({pk_of({"Key": k}) for k in spec["Keys"]}))},
            )
            for table, spec in params["RequestItems"].items()
        ]
    if operation == "Query":
        index = params.get("IndexName")
        arn = table_arn(params["TableName"]) + (f"/index/{index}" if index else "")
        partition = PARTITION_KEYS.get(index, f"{index}pk")
        attribute_names = params.get("ExpressionAttributeNames") or {}
        values = params.get("ExpressionAttributeValues") or {}
        leading: tuple[str, ...] = ()
        for left, right in re.findall(r"(#?\w+)\s*=\s*(:\w+)", params.get("KeyConditionExpression", "")):
            if attribute_names.get(left, left) == partition and right in values:
                leading = (_scalar(values[right]),)
        if not leading:
            # IAM's ForAllValues would hold over no key at all: refuse to guess instead.
            raise ValueError(
                f"no equality on {partition} in KeyConditionExpression "
                f"{params.get('KeyConditionExpression')!r}"
            )
        return [Request("dynamodb:Query", arn, {"dynamodb:LeadingKeys": leading})]
    # Scan, TransactGetItems, BatchWriteItem, table management: no item-level keys modelled; the
    # action on the table must be granted outright.
    table = params.get("TableName") or next(iter(params.get("RequestItems") or {"*": None}))
    return [Request(f"dynamodb:{operation}", table_arn(str(table)), {})]


def kms_requests(
    operation: str, params: Mapping[str, Any], names: Names, client: Any, keys: KeyFacts
) -> list[Request]:
    action = f"kms:{operation}"
    if operation == "CreateKey":
        tags = {str(t["TagKey"]): str(t["TagValue"]) for t in params.get("Tags") or []}
        context: dict[str, ContextValue] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
        if tags:
            context["aws:TagKeys"] = tuple(sorted(tags))
        context["kms:KeySpec"] = str(params.get("KeySpec", "SYMMETRIC_DEFAULT"))
        context["kms:KeyUsage"] = str(params.get("KeyUsage", "ENCRYPT_DECRYPT"))
        requests = [Request(action, "*", context)]
        if tags:
            tag_context = {k: v for k, v in context.items() if k.startswith("aws:")}
            new_key = f"arn:aws:kms:{names.region}:{names.account}:key/*"
            requests.append(Request("kms:TagResource", new_key, tag_context))
        return requests
    if operation == "CreateAlias":
        alias = f"arn:aws:kms:{names.region}:{names.account}:{params['AliasName']}"
        key_arn, key_context = keys.of(client, str(params["TargetKeyId"]), names)
        return [Request(action, alias, {}), Request(action, key_arn, key_context)]
    if "KeyId" in params:
        key_arn, key_context = keys.of(client, str(params["KeyId"]), names)
        return [Request(action, key_arn, key_context)]
    return [Request(action, "*", {})]
