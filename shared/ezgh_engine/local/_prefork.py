"""Imported only by the execution environments' forkserver, first of its preloads: its
imports (most of a second of CPU) run with the cyclic garbage collector off.

Imports make hundreds of thousands of objects and almost no garbage, and every few hundred
allocations the collector walks the young ones again (about a tenth of the imports' CPU).
The last preload (`local._warm`) freezes what they made, as Python's `gc.freeze` documents
for a process that forks: each environment (`environments.serve`) turns the collector back
on, and its collections then never walk, nor write to, the objects it shares with the
forkserver (pages a fork otherwise copies).
"""

from __future__ import annotations

import gc

gc.disable()
