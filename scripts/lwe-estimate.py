#!/usr/bin/env python3
# Primal uSVP estimate (ADPS16 success condition, core-SVP cost) of the
# LWE parameters in docs/security.md: n = 1774, q = 2^32, ternary secret
# and error (sigma = sqrt(2/3)). Prints the block size and the cost for a
# few database row counts. Rough by design: the lattice estimator models
# more attacks (hybrid, dual) and should be run before relying on a margin.
import math
def delta(b):
    return ((math.pi*b)**(1/b) * b/(2*math.pi*math.e))**(1/(2*(b-1)))
def primal_usvp(n, q, sigma, mmax):
    best=None
    for b in range(50, 1500):
        d_ok=False
        for m in range(200, mmax+1, 25):
            d=m+n+1
            lhs=math.sqrt(b)*sigma
            rhs=delta(b)**(2*b-d-1) * q**(m/d)
            if lhs<=rhs:
                d_ok=(m,d); break
        if d_ok:
            return b, d_ok
    return None
n=1774; q=2**32; sigma=math.sqrt(2/3)
for rows in [4352, 53248, 2**20, 2**24]:
    r=primal_usvp(n,q,sigma,min(rows, 6000))
    b,(m,d)=r
    print(f"rows {rows}: beta {b} (m {m}, d {d}) classical 2^{0.292*b:.0f} quantum 2^{0.265*b:.0f}")
