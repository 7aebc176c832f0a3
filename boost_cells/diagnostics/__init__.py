"""What a person looks at: reports about a run, computed on the host, outside the training step."""
from .overflow_locator import OverflowRecord, OverflowReport, OverflowReportCallback, locate_overflow

__all__ = ["OverflowRecord", "OverflowReport", "OverflowReportCallback", "locate_overflow"]
