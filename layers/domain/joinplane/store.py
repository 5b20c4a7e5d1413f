"""MIGRATION shim: the data-access layer moved to `joinplane.dal` (dynamo.py and one repository
per concept). Removed once every module imports from there."""

from joinplane.dal.dynamo import *  # noqa: F403
from joinplane.dal.dynamo import Item, Page, Write, key  # noqa: F401
