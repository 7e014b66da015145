"""The public HTTP API: every request goes to the api function (payload format 2.0)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.components.functions import LOG_RETENTION
from infra.nag import suppress

# One JSON line per request; the request id matches the api function's correlation id. The
# route, never the path: a callback's path is its token (`/v1/callbacks/<token>`), a secret
# that anyone reading the log group could post to. The route key names the operation with
# its parameters as `{name}` (`POST /v1/callbacks/{token}`), or `$default` for a path no
# route matches. No header, query string or body is logged either (an API key, a signature).
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "time": "$context.requestTime",
    "method": "$context.httpMethod",
    "route": "$context.routeKey",
    "status": "$context.status",
    "latencyMs": "$context.responseLatency",
    "integrationError": "$context.integrationErrorMessage",
}
ACCESS_LOG_FORMAT = json.dumps(ACCESS_LOG_FIELDS)


@dataclass(frozen=True)
class Throttle:
    """The stage's throttling, for every route together (API Gateway's token bucket): a
    steady `rate` of requests a second, and `burst` at once. Past it API Gateway answers
    429 itself, before the api function runs."""

    rate: float = 500.0
    burst: int = 1000


class Api(Construct):
    """`self.http_api` with a route to `handler` for each of `routes` and `$default` for the
    rest; `self.url` is its base URL.

    Routing lives in the function (Powertools `APIGatewayHttpResolver`): `routes` are its
    route keys (`ezgh_engine.api.app.route_keys`), given to the HTTP API only so that the
    access log names each request's route (see `ACCESS_LOG_FIELDS`); a path added to the
    function and not yet here is served through `$default` all the same.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: lambda_.IFunction,
        routes: Iterable[str] = (),
        throttle: Throttle | None = None,
    ) -> None:
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
        self.throttle = throttle or Throttle()
        self._routes(routes)
        self._stage()
        suppress(
            self.http_api,
            "APIG4",
            "Authorization is the engine's own: API keys (hashed, per project) and short-lived "
            "invocation tokens, checked in the api function. /v1/health is public by design.",
            children=True,
        )

    def _routes(self, route_keys: Iterable[str]) -> None:
        """A route per key, to the `$default` route's integration: the Lambda permission CDK
        gave that integration covers every route of the API (`<api>/*/*`), so these need
        none of their own (one per route would crowd the function's resource policy)."""
        found = [c for c in self.http_api.node.find_all() if isinstance(c, apigw.CfnIntegration)]
        if len(found) != 1:
            raise ValueError(f"expected the $default route's integration alone, found {len(found)}")
        target = f"integrations/{found[0].ref}"
        for key in route_keys:
            # Named by its key, so adding or moving one route leaves the others in place.
            name = "Route" + hashlib.sha256(key.encode()).hexdigest()[:12]
            apigw.CfnRoute(
                self.http_api, name, api_id=self.http_api.api_id, route_key=key, target=target
            )

    def _stage(self) -> None:
        log_group = logs.LogGroup(
            self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
        )
        stage = self.http_api.default_stage
        assert stage is not None  # created by default
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        cfn_stage.access_log_settings = apigw.CfnStage.AccessLogSettingsProperty(
            destination_arn=log_group.log_group_arn, format=ACCESS_LOG_FORMAT
        )
        cfn_stage.default_route_settings = apigw.CfnStage.RouteSettingsProperty(
            throttling_rate_limit=self.throttle.rate,
            throttling_burst_limit=self.throttle.burst,
        )
