"""The oracle lender: knows each applicant's latent default and approves exactly the repayers."""

from __future__ import annotations

import numpy as np

from policies.base import Policy


class Oracle(Policy):
    """Approve iff the applicant's latent default outcome is 0 (privileged information)."""

    name = "oracle"
    privileged = ("default",)
    requires = frozenset({"latent_default"})

    def _decide(self, obs, info):
        if info is None or "default" not in info.privileged:
            raise ValueError("the oracle needs the latent default column (privileged info)")
        return (~info.privileged["default"].astype(bool)).astype(float)
