"""The kubelet device plugin advertising fluxion.flux-framework.org/<type> on every node.

Fluxion decides which backend a pod gets; the kubelet only has to admit pods
that request ``fluxion.flux-framework.org/<type>``, so every configured type is
advertised as a pool of interchangeable virtual devices. Modules:

- ``settings``: the ``FLUENCE_*`` environment of the process;
- ``api``: the ``v1beta1`` messages and services, declared in Python;
- ``proto``: typed gRPC glue for the ``v1beta1`` services;
- ``devices``: device and socket naming, preferred sets, Allocate env;
- ``server``: the DevicePlugin RPCs of one type and its gRPC server;
- ``registration``: ``Register`` on kubelet.sock;
- ``manager``: the plugin set (from the resources config, followed with
  ``fluence.config_watch``), kubelet restarts, retries;
- ``health``, ``metrics``: ``/healthz`` and ``/metrics``;
- ``__main__``: the ``fluence-deviceplugin`` console script (usage there).
"""
