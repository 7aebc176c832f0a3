"""What a person looks at: reports about a run, computed on the host, outside the training step (the overflow
locator, the training monitor and its plot)."""
from .monitor import BoostMonitor, format_record, read_run
from .overflow_locator import OverflowRecord, OverflowReport, OverflowReportCallback, locate_overflow

__all__ = ["BoostMonitor", "OverflowRecord", "OverflowReport", "OverflowReportCallback", "format_record",
           "locate_overflow", "read_run"]
