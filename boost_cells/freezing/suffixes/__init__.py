"""What a frozen step trains, built once before the first step: the network's trainable parameters cut front to back
into nested suffixes (``groups``: ``GradientFreeze``), and one optimizer per suffix (``suffix_optimizers``:
``FreezeOpt``) that uses the user's optimizer state (``shared_state``)."""
