"""The compiled small-message path: its API entry and guard (:mod:`.api`) and its engine
side (:mod:`.engine`).  Nothing is imported here, so the engine can load :mod:`.engine`
without the API modules."""
