"""A record's attribute table: the stored attribute name of each of its fields, written once beside
the record and used both by the record (`from_item`/`to_item`) and by dal.stream's tolerant images
of it, so a name cannot drift between the table's writer and the stream's reader."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from joinplane.dal.dynamo import Item

# Set by the one write of a machine that publishes no event (a renewal that keeps the key), so the
# event publisher's stream mapping drops its record unread (template.yaml's filter); every other
# update of a machine removes it, and a Put never writes it.
NO_EVENT = "noEvent"


def read(item: Item, attributes: Mapping[str, str], required: Collection[str] = ()) -> dict[str, Any]:
    """Each field's stored value (None when absent); KeyError when a `required` field's is absent."""
    for field in required:
        if attributes[field] not in item:
            raise KeyError(attributes[field])
    return {field: item.get(attribute) for field, attribute in attributes.items()}


def write(attributes: Mapping[str, str], values: Mapping[str, Any]) -> Item:
    """The stored attributes of the fields' `values` (every field of the table)."""
    return {attribute: values[field] for field, attribute in attributes.items()}
