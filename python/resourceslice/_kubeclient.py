"""The ``kubernetes`` client's side: an ApiClient that closes its connections, and one made
from a kubeconfig that :class:`~resourceslice.connection.Connection` cannot use (an exec
plugin, an auth provider, a proxy). Imported only when such a client is wanted.
"""

from __future__ import annotations

from kubernetes.client import ApiClient, Configuration

from resourceslice._configerror import ConfigError


class ClosingApiClient(ApiClient):
    """An ApiClient whose ``close()`` also closes its connections.

    Clients before 37 close only their thread pool, and keep the last response of a
    generated method in ``last_response`` (with its connection, when it was not read): they
    leave those sockets to the garbage collector, a ResourceWarning each. The clients this
    package makes close them.
    """

    def close(self) -> None:
        super().close()  # type: ignore[no-untyped-call]
        last = self.__dict__.pop("last_response", None)
        response = getattr(last, "urllib3_response", last)  # 34-36 wrap it in a RESTResponse
        if response is not None:
            response.close()
        self.rest_client.pool_manager.clear()


def kubeconfig_client(config_file: str, context: str | None = None) -> ClosingApiClient:
    """A client of the kubeconfig ``config_file`` (``:``-separated files are merged); the
    client's ConfigException is raised as :class:`~resourceslice.connection.ConfigError`."""
    import kubernetes.config
    from kubernetes.config.config_exception import ConfigException

    configuration = Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=config_file,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except ConfigException as exc:
        raise ConfigError(f"kubeconfig {config_file}: {exc}") from exc
    return ClosingApiClient(configuration)
