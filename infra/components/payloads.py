"""The S3 bucket for values too large to keep inline in a DynamoDB item."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import suppress

# A lifecycle rule only sees an object's age, not whether its run has ended. A run may last a
# year and its data is kept 30 days after it ends, so the safety net is 365 + 30 + 1 days;
# the engine deletes a run's payloads itself when the run is deleted (payloads.delete_run_payloads).
PAYLOAD_EXPIRATION = Duration.days(396)


class Payloads(Construct):
    """`self.bucket`: private, encrypted, TLS only, unversioned (payloads are write-once)."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=False,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-payloads",
                    expiration=PAYLOAD_EXPIRATION,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            # Payloads belong to durable runs, like the tables: keep them when the stack goes.
            removal_policy=RemovalPolicy.RETAIN,
        )
        suppress(
            self.bucket,
            "S1",
            "Only the engine's own Lambda roles touch this private bucket and "
            "CloudTrail records their API calls; server access logs would need a second "
            "bucket that bills while idle.",
        )
