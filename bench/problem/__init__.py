"""The values that describe an attention problem, free of torch where they can be: a shape (sizes, variant, dtype,
MLA dims, serving batch), its mask, its score variant, its sparsity and keep-set, and a case (one backend on one
shape, phase and pass). Every other layer (the counts, the reference, the kinds, the engine, the report) reads
these."""
