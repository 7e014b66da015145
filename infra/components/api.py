"""The public HTTP API: every request goes to the api function (payload format 2.0)."""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.components.functions import LOG_RETENTION
from infra.nag import suppress

# One JSON line per request; the request id matches the api function's correlation id.
_ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "ip": "$context.identity.sourceIp",
        "time": "$context.requestTime",
        "method": "$context.httpMethod",
        "path": "$context.path",
        "status": "$context.status",
        "latencyMs": "$context.responseLatency",
        "integrationError": "$context.integrationErrorMessage",
    }
)


class Api(Construct):
    """`self.http_api` with a `$default` route to `handler`; `self.url` is its base URL.

    Routing lives in the function (Powertools `APIGatewayHttpResolver`), so the API has one
    catch-all route and never needs redeploying when a path is added.
    """

    def __init__(self, scope: Construct, id: str, *, handler: lambda_.IFunction) -> None:
        super().__init__(scope, id)
        self.http_api = apigw.HttpApi(
            self,
            "Http",
            description="EZGH Workflows engine API",
            default_integration=integrations.HttpLambdaIntegration(
                "Handler", handler, payload_format_version=apigw.PayloadFormatVersion.VERSION_2_0
            ),
        )
        # `apiEndpoint` is "https://{id}.execute-api.{region}.{suffix}" with no trailing slash:
        # built from the API's own id, so the function may reference it without a cycle.
        self.url: str = self.http_api.api_endpoint
        self._access_logs()
        suppress(
            self.http_api,
            "APIG4",
            "Authorization is the engine's own: API keys (hashed, per project) and short-lived "
            "invocation tokens, checked in the api function. /v1/health is public by design.",
            children=True,
        )

    def _access_logs(self) -> None:
        log_group = logs.LogGroup(
            self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
        )
        stage = self.http_api.default_stage
        assert stage is not None  # created by default
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        cfn_stage.access_log_settings = apigw.CfnStage.AccessLogSettingsProperty(
            destination_arn=log_group.log_group_arn, format=_ACCESS_LOG_FORMAT
        )
