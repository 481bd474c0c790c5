"""``fluence-webhook``: serve the mutating webhook (default), or ``certs`` for its certificates."""

from __future__ import annotations

import logging
import ssl
import sys
from collections.abc import Callable
from typing import Protocol

from fluence import telemetry
from fluence.kube_client import api_client
from fluence.serving import TLSFiles, run, serve_app
from fluence.settings import command_line
from webhook import certs
from webhook.admission import Admission
from webhook.app import create_app
from webhook.env import ContractFile, EnvContract
from webhook.gang import GangCluster, GangWiring, KubeGangCluster
from webhook.job_runtime import JobDeadlines, JobRuntimes
from webhook.settings import ClientAuth, WebhookSettings

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


class WebhookCluster(GangCluster, JobDeadlines, Protocol):
    """Every API call the webhook makes (:class:`KubeGangCluster` in a cluster)."""


def build_wiring(settings: WebhookSettings, cluster: GangCluster | None) -> GangWiring | None:
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


def build_admission(
    settings: WebhookSettings,
    contract: Callable[[], EnvContract],
    cluster: WebhookCluster | None,
    client_auth: ClientAuth,
) -> Admission:
    """The review logic for the mode in force.

    Without client authentication anyone who reaches the port can post a review and
    claim any ``userInfo``, namespace or owner, so nothing in it may borrow the
    webhook's own rights: no PodGroup is created and no Job is read. What is left is
    computed from the pod alone (the backend variables), which gives a forger nothing.
    """
    if client_auth is not ClientAuth.MTLS:
        return Admission(contract, None, None, authenticated=False, queue=settings.queue)
    wiring = build_wiring(settings, cluster)
    runtimes = JobRuntimes(cluster, budget_seconds=settings.api_budget_seconds)
    return Admission(contract, wiring, runtimes, queue=settings.queue)


def check_tls(settings: WebhookSettings) -> None:
    """Fail at start on an unusable pair or client CA; the server would otherwise run and
    refuse every client (or, worse, fall back to trusting any)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    client_ca = settings.client_ca_file()
    if client_ca is not None:
        context.load_verify_locations(cafile=client_ca)


def announce(settings: WebhookSettings, client_auth: ClientAuth) -> None:
    """One line saying which mode is in force (also on /readyz and as a metric)."""
    if client_auth is ClientAuth.MTLS:
        log.info(
            "client authentication: mtls; only callers with a certificate from the client CA "
            "are answered, PodGroups are created and Jobs read for them",
            extra={"client_auth": client_auth.value, "client_ca": settings.client_ca},
        )
        return
    log.warning(
        "client authentication: none; any caller is answered, so no PodGroup is created and "
        "no Job is read (set FLUENCE_CLIENT_CA to the CA of the API server's webhook client "
        "certificate to turn them on)",
        extra={"client_auth": client_auth.value, "client_ca": settings.client_ca},
    )


async def serve(settings: WebhookSettings) -> None:
    # Looked up once: the mode and the TLS context must agree.
    client_ca = settings.client_ca_file()
    client_auth = ClientAuth.MTLS if client_ca is not None else ClientAuth.NONE
    announce(settings, client_auth)
    contract = ContractFile(settings.resources)
    cluster = build_cluster(settings) if client_auth is ClientAuth.MTLS else None
    admission = build_admission(settings, contract.current, cluster, client_auth)
    wiring = admission.wiring
    ready = False
    app = create_app(settings, admission, ready=lambda: ready, client_auth=client_auth)
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
        client_ca=client_ca,
        insecure_bind=settings.probe_bind or None,
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
        commands.add_parser(
            "certs",
            help="make a CA and serving certificate, or the API server's client certificate; "
            "see webhook.certs",
        )
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
            "webhook could not start; check FLUENCE_BIND, FLUENCE_PROBE_BIND, "
            "FLUENCE_TLS_CERT/KEY and FLUENCE_CLIENT_CA",
            extra={"error": str(e)},
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
