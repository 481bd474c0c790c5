"""``fluence-webhook``: serve the mutating webhook (default), or ``certs`` for its certificates."""

from __future__ import annotations

import logging
import ssl
import sys

from fluence import telemetry
from fluence.kube_client import api_client
from fluence.serving import TLSFiles, run, serve_app
from fluence.settings import command_line
from webhook import certs
from webhook.admission import Admission
from webhook.app import create_app
from webhook.env import ContractFile
from webhook.gang import GangWiring, KubeGangCluster
from webhook.job_runtime import JobRuntimes
from webhook.settings import WebhookSettings

log = logging.getLogger("webhook")


def build_cluster(settings: WebhookSettings) -> KubeGangCluster | None:
    """The webhook's API calls; None (logged) when there are no credentials."""
    try:
        client = api_client(settings.kubeconfig)
    except Exception as e:
        log.warning(
            "no Kubernetes credentials: no gang wiring and no runtime from owning Jobs; "
            "set FLUENCE_KUBECONFIG or run in-cluster",
            extra={"error": str(e)},
        )
        return None
    return KubeGangCluster(client, timeout=settings.api_timeout_seconds)


def build_wiring(settings: WebhookSettings, cluster: KubeGangCluster | None) -> GangWiring | None:
    """Gang wiring, unless it is off or there is no API client."""
    if not settings.gang or cluster is None:
        return None
    return GangWiring(
        cluster,
        recheck_seconds=settings.api_recheck_seconds,
        ensured_ttl=settings.podgroup_cache_seconds,
        budget_seconds=settings.api_budget_seconds,
        trusted_controllers=settings.trusted_controller_names(),
    )


def check_tls(settings: WebhookSettings) -> None:
    """Fail at start on an unusable pair; the server would otherwise run and refuse every client."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)


async def serve(settings: WebhookSettings) -> None:
    contract = ContractFile(settings.resources)
    cluster = build_cluster(settings)
    wiring = build_wiring(settings, cluster)
    runtimes = JobRuntimes(cluster, budget_seconds=settings.api_budget_seconds)
    ready = False
    app = create_app(settings, Admission(contract.current, wiring, runtimes), ready=lambda: ready)
    background = []
    if wiring is not None:
        await wiring.refresh()
        background.append(wiring.watch)

    def on_ready() -> None:
        nonlocal ready
        ready = True

    await serve_app(
        app,
        settings.bind,
        tls_files=TLSFiles(settings.tls_cert, settings.tls_key),
        background=background,
        on_ready=on_ready,
        http2=settings.http2,
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line(
        WebhookSettings,
        "fluence-webhook",
        "Mutating admission webhook of fluence; settings: FLUENCE_* variables.",
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve POST /mutate over HTTPS (the default)")
    certs.add_arguments(
        commands.add_parser("certs", help="make a CA and serving certificate; see webhook.certs")
    )
    args = parser.parse_args(argv)
    telemetry.setup("fluence-webhook")
    if args.command == "certs":
        return certs.run(args)
    settings = WebhookSettings()
    try:
        check_tls(settings)
        run(serve(settings), settings.event_loop)
    except (OSError, ValueError, ssl.SSLError) as e:
        log.error(
            "webhook could not start; check FLUENCE_BIND and FLUENCE_TLS_CERT/KEY",
            extra={"error": str(e)},
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
