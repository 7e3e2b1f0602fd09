"""The peers' own test suites as scenarios on idemflow's public API (issue #18).

Each test names the peer test it comes from (``# peer: file::test``). A behaviour
idemflow does not offer yet is ``xfail(strict=True, raises=...)`` naming the exception
the missing feature raises today (so no other error passes for it) and the feature as
its reason, so the test turns red the day the feature lands; a behaviour idemflow
does differently on purpose is asserted as idemflow documents it, and the
docstring says so. The counts are in ``docs/migrating.md`` ("Peer scenarios").
"""
