"""resourceslice.testing.dra without a cluster: what it refuses, and why."""

from __future__ import annotations

import pytest

from resourceslice.testing import ClusterError, start_dra_cluster
from resourceslice.testing.cluster import DEFAULT_RELEASE, releases


@pytest.mark.parametrize("release", [r for r in releases() if r != DEFAULT_RELEASE])
def test_older_releases_are_refused_with_the_reason(release: str) -> None:
    # The components are the pinned release's, which read resource.k8s.io/v1 only.
    with pytest.raises(ClusterError, match=f"release {release} does not serve it"):
        start_dra_cluster(release=release)
