"""Communicators (MPI_Comm): the API surface, one module per face (L5).

``base`` (handles, attributes, error handlers, info, lifecycle, context agreement),
``p2p`` (point-to-point), ``objects`` (object messages), ``collectives``, ``intra``
(intracommunicators), ``topo`` (topologies), ``inter`` (intercommunicators), and
``common`` (what they share).  They validate and delegate: none imports the engine or
the runtime; what they need of it is a verb of :mod:`gpumpi._services`, and the
compiled small-message path is :mod:`gpumpi._fastpath`'s.
"""

from .base import COMM_NULL, Comm
from .inter import Intercomm
from .intra import Intracomm
from .topo import Cartcomm, Distgraphcomm, Graphcomm, Topocomm

__all__ = ["COMM_NULL", "Cartcomm", "Comm", "Distgraphcomm", "Graphcomm", "Intercomm", "Intracomm", "Topocomm"]
