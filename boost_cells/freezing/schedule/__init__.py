"""Which group each step trains: the plan of a run (plain Python: ``sequences``, ``plan``), the schedules that follow
it inside the compiled step (``schedules``), and the switch that takes the step they select and moves them on by the
updates it applied (``switch``)."""
