"""AWS list prices `make cost` charges, in one place: us-east-1, on-demand, in US dollars.

Each price is per one unit of what AWS bills (a request, a request unit, a GB-second, a GB), with
the page it was read from. When AWS changes a price, this file changes and `make cost` says what
every flow costs then; nothing else holds a price.
"""

from __future__ import annotations

MILLION = 1_000_000
# When the prices below were read from the pages they cite.
PRICES_READ = "2026-12-01"

# https://aws.amazon.com/dynamodb/pricing/on-demand/ (on-demand, Standard table class, us-east-1):
# $0.625 per million write request units, $0.125 per million read request units. A GSI write is
# billed as a write request unit of the table. Streams read by Lambda triggers are free
# (https://aws.amazon.com/dynamodb/pricing/on-demand/, "DynamoDB Streams").
DYNAMODB_WRU = 0.625 / MILLION
DYNAMODB_RRU = 0.125 / MILLION

# https://aws.amazon.com/kms/pricing/: $0.03 per 10,000 requests; $0.15 per 10,000 asymmetric
# requests except RSA 2048 (the pool CAs' keys are ECC_NIST_P256: Sign, Verify, GetPublicKey).
KMS_REQUEST = 0.03 / 10_000
KMS_ASYMMETRIC_REQUEST = 0.15 / 10_000
KMS_ASYMMETRIC_OPERATIONS = frozenset({"Sign", "Verify", "GetPublicKey"})
# Same page: $1 per customer managed key per month (each pool CA has one).
KMS_KEY_MONTH = 1.00

# https://aws.amazon.com/eventbridge/pricing/: custom events, $1.00 per million; each 64 KB chunk
# of an entry is one event. Delivery to a rule's target is not charged.
EVENTBRIDGE_EVENT = 1.00 / MILLION
EVENTBRIDGE_CHUNK_BYTES = 64 * 1024

# https://aws.amazon.com/lambda/pricing/ (x86, first 6 billion GB-seconds a month): $0.20 per
# million requests, $0.0000166667 per GB-second; Arm: $0.0000133334 per GB-second. Duration is
# billed rounded up to the millisecond. Filtered-out stream records invoke nothing and are free.
LAMBDA_REQUEST = 0.20 / MILLION
LAMBDA_GB_SECOND = {"x86_64": 0.0000166667, "arm64": 0.0000133334}

# https://aws.amazon.com/api-gateway/pricing/ (HTTP APIs, first 300 million a month): $1.00 per
# million requests, each request metered in 512 KB increments.
APIGATEWAY_HTTP_REQUEST = 1.00 / MILLION
APIGATEWAY_INCREMENT_BYTES = 512 * 1024

# https://aws.amazon.com/cloudwatch/pricing/ (Logs, Standard log class): $0.50 per GB ingested.
LOGS_INGESTED_GB = 0.50
GB = 1024**3

# https://aws.amazon.com/cloudwatch/pricing/: $0.10 per standard-resolution alarm metric per
# month; $3.00 per dashboard per month beyond the account's 3 free ones.
CLOUDWATCH_ALARM_MONTH = 0.10
CLOUDWATCH_DASHBOARD_MONTH = 3.00

# https://aws.amazon.com/secrets-manager/pricing/: $0.40 per secret per month (the webhook
# connection's, which EventBridge keeps in Secrets Manager).
SECRET_MONTH = 0.40
