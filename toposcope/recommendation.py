"""Deprecated path of :mod:`toposcope.report.recommendation` (see :mod:`toposcope.moved`)."""

import sys

from toposcope.moved import forward

sys.modules[__name__] = forward(__name__)
