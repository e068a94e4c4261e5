"""One module per check family. Each exposes ``run(ctx: CheckContext) -> list[Finding]``.

==========  ======================  ==================================================
prefix      module                  what it finds
==========  ======================  ==================================================
config      ``config.py``           static config disagreements (rope theta, eps, head_dim)
parity      ``parity.py``           first divergence, NaN origin, unmapped weights
rope        ``rope.py``             RoPE fault diagnosis (theta, layout, inv_freq...)
norm        ``norm.py``             normalization fault diagnosis (eps, kind, offset...)
tp          ``tp.py``               tensor-parallel shards: shard order, reduce, gather axis (--tp N)
hop         ``hop.py``             codec hop length, duration, offset, codebook order/offset,
                                    delay-pattern tail, streaming
channel     ``channel.py``          interleaved stereo flatten, downmix, axis mismatch, shape contract
dtype       ``dtype.py``            codec decoded under autocast / low precision
batch       ``batch.py``            padded batch of requests vs each request alone
rng         ``rng.py``              per-request RNG isolation
lifecycle   ``lifecycle.py``        per-request engine lifecycle contract
==========  ======================  ==================================================
"""
