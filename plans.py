"""What a run will send and what its verdicts can prove, before it sends anything.

Pure: no I/O and no SDK. It imports the checker (for the exact Clopper-Pearson
bound) and vocabulary (for the Fisher test compare_runs.py uses), both of which
load only the standard library and the project's pure modules.

A proof with allowed failures: each (model, case) pair runs one request at a
time until it has n - K passes (qualified) or K + 1 failures (not qualified),
so it never makes more than n verdict rows. n is the smallest number of runs
whose n - K passes prove the claimed pass rate:

    n = plan_size(0.9, 0.95, allowed=1)             # 46: 45 passes of at most 46
    pair_state(45, 0, n, 1)                         # "qualified"
    pair_state(3, 2, n, 1)                          # "not_qualified"
    chance_to_qualify(0.99, n, 1)                   # 0.9224...: a good pair qualifies
    false_pass_risk(0.9, n, 1)                      # 0.0051...: a pair at 85 % qualifies
    expected_requests(0.99, n, 1)                   # 44.13...: rows a pair at 99 % makes
    for line in plan_lines(["m1", "m2"], ["a", "b"], prove=0.9, allowed=1):
        print(line)                                 # the --plan printout
    print(headline(["m1", "m2"], ["a", "b"], prove=0.9, allowed=1))

A fixed run of N repeats: repeats_bound(3) is what 3 of 3 passes prove (36.8 %
at 95 %), detectable_rate(3) the true pass rate that a comparison against an
all-passing run catches with chance 80 % (58.4 %, rounded down).

Every probability is computed exactly with fractions.Fraction; a float argument
is taken as the decimal it prints as (0.99 is 99/100). Printed numbers are never
flattering: bounds and chances round down (percent_down), risks and costs up
(risk_up), and a rate the user gave is printed as given (as_given).
"""

import math
from decimal import Decimal
from fractions import Fraction

import checker
from vocabulary import NEW_FAILURE, PASS, RECOVERED, STILL_FAILING, WORSE, fisher_drop

MAX_PLAN_RUNS = 500  # verdict rows per pair: a plan that needs more is refused
MARGIN = Fraction(5, 100)  # 5 percentage points: the false-pass risk is shown this far below RATE
CHECK_RATES = ("0.95", "0.99", "0.999")  # true pass rates a plan's chance to qualify is shown at
EXPECTED_RATE = "0.99"  # true pass rate of every pair for the expected cost
POWER = 0.8  # chance of catching a worse pair that detectable_rate() is stated for
COST_QUANTUM = Decimal("0.0001")  # USD: costs are rounded up to a hundredth of a cent

QUALIFIED, NOT_QUALIFIED, RUNNING = "qualified", "not_qualified", "running"

# --------------------------------------------------------------------------
# Exact numbers in, exact numbers out.
# --------------------------------------------------------------------------


def exact(value):
    """value as a Fraction: a float as the decimal it prints as (0.1 is 1/10),
    a Decimal, int, Fraction or decimal string ("0.95") exactly."""
    if isinstance(value, bool):
        raise ValueError(f"a number is needed, not {value!r}")
    if isinstance(value, (Fraction, int)):
        return Fraction(value)
    if isinstance(value, Decimal) and value.is_finite():
        return Fraction(value)
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(repr(value))
    if isinstance(value, str):
        try:
            return exact(Decimal(value))
        except ArithmeticError:
            pass
    raise ValueError(f"a finite number is needed, not {value!r}")


def probability(value, name):
    """value as a Fraction in [0, 1], or a one-line ValueError naming it."""
    number = exact(value)
    if not 0 <= number <= 1:
        raise ValueError(f"{name} must be from 0 to 1, not {value}")
    return number


def count(value, name, least=0):
    """value if it is an int of at least `least`, else a one-line ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number of at least {least}, not {value!r}")
    return value


def plural(number, word, words=None):
    """"1 request", "2 requests"; words is the plural when it is not word + "s"."""
    return f"{number} {word if number == 1 else words or word + 's'}"


# --------------------------------------------------------------------------
# The size of a plan and the state of one pair.
# --------------------------------------------------------------------------


def proves(rate, confidence, allowed, runs):
    """True when runs - allowed passes of runs prove `rate` at `confidence`
    with the exact Clopper-Pearson lower bound."""
    return runs > allowed and checker.lower_bound(runs - allowed, runs, confidence) >= rate


def first_true(low, high, test):
    """The least n in (low, high] with test(n), by bisection: test(low) is false,
    test(high) true, and once true test stays true as n grows."""
    while high - low > 1:
        middle = (low + high) // 2
        if test(middle):
            high = middle
        else:
            low = middle
    return high


def check_plan_args(rate, confidence, allowed):
    """One-line ValueError unless 0 < rate < 1, 0 < confidence < 1 and allowed >= 0."""
    if not 0 < exact(rate) < 1:
        raise ValueError(f"the pass rate to prove must be above 0 and below 1, not {rate}")
    if not 0 < exact(confidence) < 1:
        raise ValueError(f"the confidence must be above 0 and below 1, not {confidence}")
    count(allowed, "the number of allowed failures")


def plan_size(rate, confidence=checker.CONFIDENCE, allowed=0):
    """The smallest n whose n - allowed passes of n prove `rate` at `confidence`,
    or None when even MAX_PLAN_RUNS runs are not enough.

    At 90 % and 95 %: 29 with no allowed failure, 46 with 1, 61 with 2. The
    bound of n - K of n grows with n (more passes, as many failures), so n is
    found by bisection.
    """
    check_plan_args(rate, confidence, allowed)
    if not proves(rate, confidence, allowed, MAX_PLAN_RUNS):
        return None
    return first_true(allowed, MAX_PLAN_RUNS, lambda runs: proves(rate, confidence, allowed, runs))


def largest_allowed(rate, confidence=checker.CONFIDENCE):
    """The most allowed failures whose plan stays within MAX_PLAN_RUNS runs per
    pair, or None when even a plan without failures needs more.

    At 95 %: 38 for 90 %, 16 for 95 %, 1 for 99 %. The bound of
    MAX_PLAN_RUNS - K of MAX_PLAN_RUNS falls as K grows: found by bisection.
    """
    check_plan_args(rate, confidence, 0)
    if not proves(rate, confidence, 0, MAX_PLAN_RUNS):
        return None
    # Allowing all MAX_PLAN_RUNS failures never proves: the first that fails, less one.
    return first_true(0, MAX_PLAN_RUNS,
                      lambda allowed: not proves(rate, confidence, allowed, MAX_PLAN_RUNS)) - 1


def pair_state(passes, failures, n, allowed):
    """"qualified" at n - allowed passes, "not_qualified" at allowed + 1
    failures, else "running". The two never meet within n rows; a pair with
    more than n rows is a ValueError."""
    count(passes, "passes")
    count(failures, "failures")
    count(allowed, "allowed failures")
    count(n, "the plan's runs", allowed + 1)
    if passes + failures > n:
        raise ValueError(f"a pair makes at most {plural(n, 'verdict row')}, not "
                         f"{passes + failures}")
    if passes >= n - allowed:
        return QUALIFIED
    if failures >= allowed + 1:
        return NOT_QUALIFIED
    return RUNNING


# --------------------------------------------------------------------------
# Probabilities, exact.
# --------------------------------------------------------------------------


def qualify_exact(true_rate, n, allowed):
    """chance_to_qualify() as an exact Fraction."""
    rate = probability(true_rate, "the true pass rate")
    count(allowed, "allowed failures")
    count(n, "the plan's runs", allowed + 1)
    return sum(math.comb(n, failures) * rate ** (n - failures) * (1 - rate) ** failures
               for failures in range(allowed + 1))


def chance_to_qualify(true_rate, n, allowed):
    """The chance that a pair with this true pass rate qualifies: at most
    `allowed` failures in n trials (the curtailed plan qualifies exactly when
    all n trials would have had at most that many failures)."""
    return float(qualify_exact(true_rate, n, allowed))


def risk_rate(rate, margin=MARGIN):
    """The true pass rate `margin` below `rate`, exactly (0.9 gives 17/20), or
    None when that is not above 0."""
    lower = exact(rate) - exact(margin)
    return lower if lower > 0 else None


def false_pass_risk(rate, n, allowed, margin=MARGIN):
    """The chance that a pair whose true pass rate is `margin` (5 points) below
    the claimed `rate` qualifies anyway; 0.0 when that rate is not above 0."""
    lower = risk_rate(rate, margin)
    return 0.0 if lower is None else chance_to_qualify(lower, n, allowed)


def expected_exact(true_rate, n, allowed):
    """expected_requests() as an exact Fraction: the sum over t of the chance
    that the pair is still running after t rows."""
    rate = probability(true_rate, "the true pass rate")
    count(allowed, "allowed failures")
    count(n, "the plan's runs", allowed + 1)
    total = Fraction(0)
    for rows in range(n):
        # still running: fewer than n - allowed passes and at most allowed failures
        least = max(0, rows - (n - allowed) + 1)
        total += sum(math.comb(rows, failures) * rate ** (rows - failures)
                     * (1 - rate) ** failures for failures in range(least, min(allowed, rows) + 1))
    return total


def expected_requests(true_rate, n, allowed):
    """The expected number of verdict rows of one pair with this true pass
    rate: it stops at n - allowed passes or allowed + 1 failures."""
    return float(expected_exact(true_rate, n, allowed))


def family_risk(alpha, pairs):
    """The union bound min(1, pairs * alpha): if each pair whose true pass rate
    is below RATE qualifies with chance at most alpha, the chance that any of
    `pairs` such pairs qualifies is at most this, dependent or not. Exact when
    alpha is a Fraction, else a float."""
    count(pairs, "pairs")
    bound = min(Fraction(1), pairs * probability(alpha, "alpha"))
    return bound if isinstance(alpha, Fraction) else float(bound)


def all_pairs_text(rate, alpha, pairs):
    """What holds for each pair and for all pairs together, e.g. (rate 0.9,
    alpha 0.05, 8 pairs): "each pair: if its true pass rate is below 90 %, it
    qualifies with chance at most 5.0 %; all 8 pairs together: the chance that
    any pair whose true pass rate is below 90 % qualifies is at most 40 %".

    alpha must bound each pair's chance to qualify below `rate`: 1 - confidence
    always does, chance_to_qualify(rate, n, allowed) is the least such bound.
    """
    count(pairs, "pairs", 1)
    each = (f"if its true pass rate is below {as_given(rate)} %, it qualifies with chance "
            f"at most {risk_up(alpha)} %")
    if pairs == 1:
        return f"the pair: {each}"
    return (f"each pair: {each}; all {pairs} pairs together: the chance that any pair whose "
            f"true pass rate is below {as_given(rate)} % qualifies is at most "
            f"{risk_up(family_risk(exact(alpha), pairs))} %")


def repeats_bound(repeats, confidence=checker.CONFIDENCE):
    """The pass rate that `repeats` passes of `repeats` prove at `confidence`."""
    count(repeats, "repeats", 1)
    return checker.lower_bound(repeats, repeats, confidence)


def detectable_rate(repeats, power=POWER):
    """The true pass rate at which `repeats` runs show at least one failure
    with chance `power`: (1 - power) ** (1 / repeats). A comparison against a
    run that passed every time labels such a pair NEW_FAILURE that often, and
    a worse pair more often. 0.2 ** (1 / 3) = 0.5848 for 3 repeats."""
    count(repeats, "repeats", 1)
    miss = 1 - probability(power, "power")
    return float(miss) ** (1 / repeats)


# --------------------------------------------------------------------------
# Rounding, never flattering.
# --------------------------------------------------------------------------


def percent_down(value):
    """A probability or bound in percent with one decimal, rounded down:
    0.90186 is "90.1", 0.9 is "90.0" (a float is read as the decimal it prints as)."""
    number = exact(value)
    if number < 0:
        raise ValueError(f"a percentage of a negative number: {value}")
    tenths = math.floor(number * 1000)
    return f"{tenths // 10}.{tenths % 10}"


def risk_up(value):
    """A risk in percent, rounded up to two significant digits: 0.047101 is
    "4.8", 0.00012345 is "0.013", 0.5 is "50", 0.05 is "5.0", 0 is "0" (always
    two digits, except "100" and "0")."""
    percent = exact(value) * 100
    if percent < 0:
        raise ValueError(f"a risk cannot be negative: {value}")
    if percent == 0:
        return "0"
    digit = 0  # the place of the first significant digit: 10 ** digit <= percent
    while percent >= Fraction(10) ** (digit + 1):
        digit += 1
    while percent < Fraction(10) ** digit:
        digit -= 1
    units = math.ceil(percent / Fraction(10) ** (digit - 1))  # two digits, rounded up
    if units == 100:  # 9.96 rounds up to 10: two digits of the next decade
        units, digit = 10, digit + 1
    return format(Decimal(units).scaleb(digit - 1), "f")


def as_given(value):
    """A rate or confidence the user gave, in percent as given: 0.9018 is
    "90.18", 0.95 is "95", 0.999 is "99.9"."""
    if isinstance(value, Fraction):  # a computed rate, such as RATE - 5 points
        value = Decimal(value.numerator) / value.denominator
    return checker.given_percent(value)


def up(value, quantum):
    """value (exact) rounded up to a multiple of the Decimal quantum, as a Decimal."""
    steps = math.ceil(exact(value) / Fraction(quantum))
    return Decimal(steps) * quantum


def usd_up(value):
    """A cost in USD rounded up to COST_QUANTUM, with two decimals or more: "$0.736"."""
    amount = up(value, COST_QUANTUM).normalize()
    return f"${amount:.2f}" if amount == amount.quantize(Decimal("0.01")) else f"${amount:f}"


# --------------------------------------------------------------------------
# The printout of a plan.
# --------------------------------------------------------------------------


def plan_of(prove, allowed, confidence):
    """The size of a proof's plan, or a one-line ValueError saying what fits."""
    check_plan_args(prove, confidence, allowed)
    n = plan_size(prove, confidence, allowed)
    if n is not None:
        return n
    most = largest_allowed(prove, confidence)
    where = f"to prove {as_given(prove)} % at {as_given(confidence)} %"
    if most is None:
        raise ValueError(f"{where} a pair needs more than {MAX_PLAN_RUNS} requests; choose a "
                         "lower rate or confidence")
    raise ValueError(f"{where} with {plural(allowed, 'allowed failure')} a pair needs more "
                     f"than {MAX_PLAN_RUNS} requests; allow at most {most}")


def pairs_text(models, case_ids):
    """"8 pairs (2 models x 4 cases)"."""
    return (f"{plural(len(models) * len(case_ids), 'pair')} ({plural(len(models), 'model')} x "
            f"{plural(len(case_ids), 'case')})")


def headline(models, case_ids, prove=None, allowed=0, repeats=1,
             confidence=checker.CONFIDENCE):
    """The one line a run prints before its first request, e.g. "Plan: prove
    >= 90 % at 95 % for 8 pairs (2 models x 4 cases), at most 1 allowed failure
    each: 45 passes of at most 46 requests per pair, at most 368 requests."."""
    pairs = len(models) * len(case_ids)
    if prove is None:
        if allowed:
            raise ValueError("allowed failures need a proof: give the pass rate to prove")
        count(repeats, "repeats", 1)
        return (f"Plan: {plural(repeats, 'repeat')} of {pairs_text(models, case_ids)}: "
                f"{plural(repeats * pairs, 'request')}.")
    n = plan_of(prove, allowed, confidence)
    start = (f"Plan: prove >= {as_given(prove)} % at {as_given(confidence)} % for "
             f"{pairs_text(models, case_ids)}")
    if allowed == 0:
        each = f"no allowed failure: {plural(n, 'pass', 'passes')} in a row per pair"
    else:
        each = (f"at most {plural(allowed, 'allowed failure')} each: "
                f"{plural(n - allowed, 'pass', 'passes')} of at most "
                f"{plural(n, 'request')} per pair")
    return f"{start}, {each}, at most {plural(n * pairs, 'request')}."


def cost_of(mean_cost, model):
    """A model's mean cost per request (Decimal USD) from a number or a dict, or None."""
    if isinstance(mean_cost, dict):
        return mean_cost.get(model)
    return mean_cost


def proof_lines(models, case_ids, prove, allowed, confidence, mean_cost):
    """plan_lines() of a proof, after its headline."""
    n = plan_of(prove, allowed, confidence)
    pairs = len(models) * len(case_ids)
    stops = f"stops at {plural(allowed + 1, 'failure')}"
    lines = [f"per pair: at most {plural(n, 'request')}; qualifies at "
             f"{plural(n - allowed, 'pass', 'passes')}, {stops}",
             "chance to qualify if the true pass rate is " + "; ".join(
                 f"{as_given(rate)} %: {percent_down(qualify_exact(rate, n, allowed))} %"
                 for rate in CHECK_RATES)]
    lower = risk_rate(prove)
    if lower is not None:
        # the chance to qualify grows with the true rate: what holds at RATE - 5 holds below it
        lines.append(f"risk: a pair whose true pass rate is {as_given(lower)} % or lower "
                     f"qualifies with chance at most {risk_up(qualify_exact(lower, n, allowed))} %")
    if pairs:
        lines.append(all_pairs_text(prove, qualify_exact(prove, n, allowed), pairs))
    likely = expected_exact(EXPECTED_RATE, n, allowed)
    lines.append(f"expected requests per pair if its true pass rate is "
                 f"{as_given(EXPECTED_RATE)} %: {up(likely, Decimal('0.1'))} (rounded up)")
    lines.append(f"total: at most {plural(n * pairs, 'request')}")
    if mean_cost is not None:
        for model in models:
            mean = cost_of(mean_cost, model)
            most = n * len(case_ids)
            if mean is None:
                lines.append(f"cost {model}: unknown (no mean cost per request)")
                continue
            lines.append(f"cost {model}: at most {usd_up(exact(mean) * most)} for "
                         f"{plural(most, 'request')}; expected "
                         f"{usd_up(exact(mean) * likely * len(case_ids))} if every pair's true "
                         f"pass rate is {as_given(EXPECTED_RATE)} %")
    return lines


def repeat_lines(models, case_ids, repeats, confidence, mean_cost):
    """plan_lines() of a fixed number of repeats, after its headline."""
    pairs = len(models) * len(case_ids)
    lines = [f"per pair: {plural(repeats, 'request')}; {repeats} of "
             f"{plural(repeats, 'pass', 'passes')} would prove pass rate >= "
             f"{percent_down(repeats_bound(repeats, confidence))} % ({as_given(confidence)} %)",
             f"a comparison against an all-passing run catches a pair whose true pass rate is "
             f"{percent_down(detectable_rate(repeats))} % or lower with chance at least "
             f"{as_given(POWER)} %",
             f"total: {plural(repeats * pairs, 'request')}"]
    if mean_cost is not None:
        for model in models:
            mean = cost_of(mean_cost, model)
            sent = repeats * len(case_ids)
            lines.append(f"cost {model}: unknown (no mean cost per request)" if mean is None
                         else f"cost {model}: {usd_up(exact(mean) * sent)} for "
                         f"{plural(sent, 'request')}")
    return lines


def plan_lines(models, case_ids, prove=None, allowed=0, repeats=1,
               confidence=checker.CONFIDENCE, mean_cost=None):
    """The --plan printout, one line each, headline() first; nothing is sent.

    prove: the pass rate to prove (each pair runs until it qualifies or fails
    out, with `allowed` failures), or None for `repeats` runs of every pair.
    mean_cost: USD per request (a Decimal, or a dict model -> Decimal), e.g.
    the mean of a baseline record; costs are then stated per model.
    """
    first = headline(models, case_ids, prove, allowed, repeats, confidence)
    if prove is None:
        return [first, *repeat_lines(models, case_ids, repeats, confidence, mean_cost)]
    return [first, *proof_lines(models, case_ids, prove, allowed, confidence, mean_cost)]


# --------------------------------------------------------------------------
# Two proofs of one pair, compared.
# --------------------------------------------------------------------------


def proof_label(before, after, confidence=checker.CONFIDENCE):
    """The label of one pair from two proofs, each {"qualified", "passed", "runs"}.

    PASS: qualified both times; NEW_FAILURE: qualified before, not after;
    RECOVERED: not before, qualified after; WORSE: neither, and the one-sided
    Fisher exact test finds after's pass rate lower at 1 - confidence
    (p <= 1 - confidence); else STILL_FAILING. 25 of 26 before and 0 of 1
    after give p = 0.074: STILL_FAILING at 95 %. Curtailed runs stop on their
    own results, so this p-value is a guide, not an exact error rate.
    """
    if before["qualified"]:
        return PASS if after["qualified"] else NEW_FAILURE
    if after["qualified"]:
        return RECOVERED
    p_value = fisher_drop(before["passed"], before["runs"], after["passed"], after["runs"])
    # fisher_drop's float against the float nearest 1 - confidence (0.05, not
    # 1 - 0.95 = 0.050000000000000044): a p-value of exactly 1/20 is significant.
    return WORSE if p_value <= float(1 - exact(confidence)) else STILL_FAILING
