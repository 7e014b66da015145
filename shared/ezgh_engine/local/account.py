"""The local stack's fixed AWS identity: one account, one region, one name prefix (read by
the emulator, its journal and the provisioning alike)."""

from __future__ import annotations

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"  # moto's default account
NAME_PREFIX = "ezgh-local"
