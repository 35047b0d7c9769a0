"""Serving HTTP: the one server every toposcope daemon runs on, and what it puts around apps.

cheroot with toposcope's request limits (:mod:`.httpconnection`, :mod:`.httplimits`), basic
auth and host checks (:mod:`.httpguard`), gzip (:mod:`.httpgzip`), bounded JSON bodies
(:mod:`.jsonbody`), the APIFlask conventions of the HTTP APIs (:mod:`.httpapi`), the web
configuration file in exporter-toolkit's format and its live reload (:mod:`.webconfig`,
:mod:`.livewebconfig`, :mod:`.tlsconfig`, :mod:`.webflags`, :mod:`.webconfigfailures`), a
plain-HTTP request on a TLS port (:mod:`.plainhttp`), each daemon's own ``/metrics``
(:mod:`.selfmetrics`) and throwaway certificates for a local stack (:mod:`.devcerts`).
"""
