"""What the frozen levels' route measures and decides on the host, between steps: the costs it times (``ledger``),
the rules of what pays (``payback``), the frozen prefix's cache and its measured rules (``prefix_cache``,
``cache_judge``), the one policy that decides from them (``policy``), and the records of every decision a person reads
(``decisions``)."""
