"""plans.py: the size of a proof with allowed failures, its chances and costs,
the --plan printout and the label of two proofs compared. Pure and offline.

The probabilities are checked against testdata/plans_reference.json, computed
once with exact rationals from the curtailed process by a separate script (its
"note" says how), never by plans.py itself.
"""

import collections
import contextlib
import functools
import io
import itertools
import json
import os
import sys
import unittest
import unittest.mock
from decimal import Decimal
from fractions import Fraction

import checker
import compare_runs
import plans
import vocabulary

REFERENCE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                              "plans_reference.json")
with open(REFERENCE_PATH, encoding="utf-8") as reference_file:
    REFERENCE = json.load(reference_file)

# (rate, allowed failures) -> runs per pair, at 95 %
SIZES = {(0.9, 0): 29, (0.9, 1): 46, (0.9, 2): 61, (0.95, 0): 59, (0.95, 1): 93, (0.95, 2): 124}
TOLERANCE = 1e-12  # relative: the reference has 30 digits, a float about 16
MODELS, CASES = ["m1", "m2"], ["a", "b", "c", "d"]


def curtailed(sequence, n, allowed):
    """The rows a curtailed pair reads of a full verdict sequence, and whether it qualified."""
    passes = failures = 0
    for rows, verdict in enumerate(sequence, 1):
        passes, failures = passes + verdict, failures + (not verdict)
        if passes >= n - allowed or failures > allowed:
            return rows, passes >= n - allowed
    raise AssertionError("a curtailed pair always decides within n rows")


@functools.cache
def outcomes(n, allowed):
    """How many of all 2 ** n verdict sequences end each way: (passes in the
    sequence, rows read, qualified) -> count."""
    return collections.Counter((sum(sequence), *curtailed(sequence, n, allowed))
                               for sequence in itertools.product((True, False), repeat=n))


def enumerated(rate, n, allowed):
    """(chance to qualify, expected rows) by enumerating all 2 ** n sequences,
    each weighed by its chance at this rate."""
    rate = Fraction(rate)
    chance = rows = Fraction(0)
    for (passes, read, qualified), count in outcomes(n, allowed).items():
        weight = count * rate ** passes * (1 - rate) ** (n - passes)
        chance += weight * qualified
        rows += weight * read
    return chance, rows


class PlanSizeTest(unittest.TestCase):
    def test_runs_per_pair_at_90_and_95_percent(self):
        for (rate, allowed), runs in SIZES.items():
            with self.subTest(rate=rate, allowed=allowed):
                self.assertEqual(plans.plan_size(rate, 0.95, allowed), runs)

    def test_each_size_is_the_smallest_that_proves_the_rate(self):
        for (rate, allowed), runs in SIZES.items():
            with self.subTest(rate=rate, allowed=allowed):
                self.assertGreaterEqual(checker.lower_bound(runs - allowed, runs, 0.95), rate)
                self.assertLess(checker.lower_bound(runs - 1 - allowed, runs - 1, 0.95), rate)

    def test_sizes_agree_with_the_exact_reference(self):
        for plan in REFERENCE["plans"]:
            with self.subTest(rate=plan["rate"], allowed=plan["allowed"]):
                self.assertEqual(plans.plan_size(float(plan["rate"]), REFERENCE["confidence"],
                                                 plan["allowed"]), plan["n"])

    def test_largest_allowed_failures_within_500_runs(self):
        self.assertEqual(plans.MAX_PLAN_RUNS, REFERENCE["max_plan_runs"])
        for rate, most in REFERENCE["largest_allowed"].items():
            with self.subTest(rate=rate):
                self.assertEqual(plans.largest_allowed(float(rate), 0.95), most)
                self.assertLessEqual(plans.plan_size(float(rate), 0.95, most), 500)
                self.assertIsNone(plans.plan_size(float(rate), 0.95, most + 1))

    def test_no_plan_fits_when_even_no_failure_needs_more_than_500_runs(self):
        # 0.995 needs 598 passes in a row at 95 %
        self.assertIsNone(plans.plan_size(0.995, 0.95, 0))
        self.assertIsNone(plans.largest_allowed(0.995, 0.95))

    def test_impossible_arguments_are_one_line_errors(self):
        for args in ((0, 0.95, 0), (1, 0.95, 0), (0.9, 1.0, 0), (0.9, 0.95, -1), (0.9, 0.95, 1.5),
                     (0.9, 0.95, True)):
            with self.subTest(args=args), self.assertRaises(ValueError) as caught:
                plans.plan_size(*args)
            self.assertNotIn("\n", str(caught.exception))


class PairStateTest(unittest.TestCase):
    def test_one_allowed_failure_of_46(self):
        for passes, failures, state in ((0, 0, "running"), (44, 0, "running"),
                                        (45, 0, "qualified"), (44, 1, "running"),
                                        (45, 1, "qualified"), (0, 1, "running"),
                                        (0, 2, "not_qualified"), (43, 2, "not_qualified")):
            with self.subTest(passes=passes, failures=failures):
                self.assertEqual(plans.pair_state(passes, failures, 46, 1), state)

    def test_no_allowed_failure_stops_at_the_first(self):
        for passes, failures, state in ((28, 0, "running"), (29, 0, "qualified"),
                                        (0, 1, "not_qualified"), (28, 1, "not_qualified")):
            with self.subTest(passes=passes, failures=failures):
                self.assertEqual(plans.pair_state(passes, failures, 29, 0), state)

    def test_rows_where_each_sequence_stops(self):
        for sequence, rows, state in (((False, False), 2, "not_qualified"),
                                      ((True,) * 45, 45, "qualified"),
                                      ((False,) + (True,) * 45, 46, "qualified"),
                                      ((True,) * 44 + (False, True), 46, "qualified"),
                                      ((True,) * 44 + (False, False), 46, "not_qualified")):
            with self.subTest(rows=rows, state=state):
                passes = failures = 0
                for row, verdict in enumerate(sequence, 1):
                    self.assertEqual(plans.pair_state(passes, failures, 46, 1), "running")
                    passes, failures = passes + verdict, failures + (not verdict)
                self.assertEqual((row, plans.pair_state(passes, failures, 46, 1)), (rows, state))

    def test_every_sequence_decides_within_n_rows(self):
        for allowed in range(4):
            for sequence in itertools.product((True, False), repeat=6):
                passes = failures = 0
                for verdict in sequence:
                    if plans.pair_state(passes, failures, 6, allowed) != "running":
                        break
                    passes, failures = passes + verdict, failures + (not verdict)
                with self.subTest(allowed=allowed, sequence=sequence):
                    self.assertNotEqual(plans.pair_state(passes, failures, 6, allowed), "running")

    def test_more_rows_than_the_plan_is_an_error(self):
        with self.assertRaises(ValueError):
            plans.pair_state(45, 2, 46, 1)

    def test_the_smallest_plan_has_one_run_more_than_the_allowed_failures(self):
        # n = allowed + 1: one pass qualifies, allowed + 1 failures do not
        for passes, failures, state in ((0, 0, "running"), (1, 0, "qualified"),
                                        (0, 1, "running"), (0, 2, "not_qualified")):
            with self.subTest(passes=passes, failures=failures):
                self.assertEqual(plans.pair_state(passes, failures, 2, 1), state)


class ArgumentErrorTest(unittest.TestCase):
    def test_each_refused_argument_is_named_in_the_message(self):
        for call, args, message in (
                (plans.pair_state, (0, 0, 5, -1),
                 "allowed failures must be a whole number of at least 0, not -1"),
                (plans.pair_state, (0, 0, 1, 1),
                 "the plan's runs must be a whole number of at least 2, not 1"),
                (plans.chance_to_qualify, (1.5, 46, 1),
                 "the true pass rate must be from 0 to 1, not 1.5"),
                (plans.expected_requests, (0.99, 1, 1),
                 "the plan's runs must be a whole number of at least 2, not 1"),
                (plans.repeats_bound, (0,), "repeats must be a whole number of at least 1, not 0"),
                (plans.plan_size, (0.9, 1.0, 0),
                 "the confidence must be above 0 and below 1, not 1.0"),
                (plans.qualify_exact, (0.5, 5, -1),
                 "allowed failures must be a whole number of at least 0, not -1"),
                (plans.qualify_exact, (0.5, 1, 1),
                 "the plan's runs must be a whole number of at least 2, not 1"),
                (plans.family_risk, (0.05, -1), "pairs must be a whole number of at least 0, "
                                                "not -1"),
                (plans.family_risk, (1.5, 2), "alpha must be from 0 to 1, not 1.5"),
                (plans.all_pairs_text, (0.9, 0.05, 0),
                 "pairs must be a whole number of at least 1, not 0")):
            with self.subTest(call=call.__name__, args=args):
                with self.assertRaises(ValueError) as caught:
                    call(*args)
                self.assertEqual(str(caught.exception), message)

    def test_allowed_failures_without_a_proof_say_what_is_missing(self):
        with self.assertRaises(ValueError) as caught:
            plans.headline(MODELS, CASES, allowed=1, repeats=3)
        self.assertEqual(str(caught.exception),
                         "allowed failures need a proof: give the pass rate to prove")


class ChanceTest(unittest.TestCase):
    def assertClose(self, ours, expected):
        self.assertLessEqual(abs(ours - expected), TOLERANCE * expected, (ours, expected))

    def test_chance_to_qualify_matches_the_reference(self):
        for plan in REFERENCE["plans"]:
            for true_rate, chance in plan["chance_to_qualify"].items():
                with self.subTest(rate=plan["rate"], allowed=plan["allowed"], true=true_rate):
                    self.assertClose(plans.chance_to_qualify(float(true_rate), plan["n"],
                                                             plan["allowed"]), float(chance))

    def test_chance_and_expected_rows_match_the_enumerated_reference(self):
        for small in REFERENCE["small"]:
            args = float(small["true_rate"]), small["n"], small["allowed"]
            with self.subTest(**small):
                self.assertClose(plans.chance_to_qualify(*args), float(small["chance_to_qualify"]))
                self.assertClose(plans.expected_requests(*args), float(small["expected_requests"]))

    def test_false_pass_risk_is_the_chance_5_points_below(self):
        for plan in REFERENCE["plans"]:
            below = format((Decimal(plan["rate"]) - Decimal("0.05")).normalize(), "f")
            with self.subTest(rate=plan["rate"], allowed=plan["allowed"]):
                self.assertClose(plans.false_pass_risk(float(plan["rate"]), plan["n"],
                                                       plan["allowed"]),
                                 float(plan["chance_to_qualify"][below]))

    def test_a_pair_just_below_the_claim_qualifies_at_most_5_percent_of_the_time(self):
        for plan in REFERENCE["plans"]:
            with self.subTest(rate=plan["rate"], allowed=plan["allowed"]):
                self.assertLessEqual(Fraction(plan["chance_to_qualify"][plan["rate"]]),
                                     Fraction(1, 20))

    def test_expected_requests_match_the_reference(self):
        for plan in REFERENCE["plans"]:
            for true_rate, rows in plan["expected_requests"].items():
                with self.subTest(rate=plan["rate"], allowed=plan["allowed"], true=true_rate):
                    self.assertClose(plans.expected_requests(float(true_rate), plan["n"],
                                                             plan["allowed"]), float(rows))

    def test_expected_requests_match_brute_force_enumeration(self):
        for rate in (Fraction(1, 2), Fraction(9, 10), Fraction(1, 3)):
            for n in range(1, 9):
                for allowed in range(n):
                    with self.subTest(rate=rate, n=n, allowed=allowed):
                        chance, rows = enumerated(rate, n, allowed)
                        self.assertEqual(plans.expected_exact(rate, n, allowed), rows)
                        self.assertEqual(plans.qualify_exact(rate, n, allowed), chance)

    def test_certain_rates(self):
        self.assertEqual(plans.chance_to_qualify(1, 46, 1), 1.0)
        self.assertEqual(plans.chance_to_qualify(0, 46, 1), 0.0)
        self.assertEqual(plans.expected_requests(1, 46, 1), 45.0)
        self.assertEqual(plans.expected_requests(0, 46, 1), 2.0)


class AllPairsTest(unittest.TestCase):
    def test_union_bound(self):
        for alpha, pairs, bound in ((0.05, 8, 0.4), (0.05, 1, 0.05), (0.05, 0, 0.0),
                                    (0.05, 20, 1.0), (0.05, 30, 1.0),
                                    (Fraction(1, 20), 3, Fraction(3, 20))):
            with self.subTest(alpha=alpha, pairs=pairs):
                self.assertEqual(plans.family_risk(alpha, pairs), bound)

    def test_union_bound_holds_for_independent_pairs_too(self):
        for pairs in range(1, 40):
            with self.subTest(pairs=pairs):
                self.assertLessEqual(1 - Fraction(19, 20) ** pairs,
                                     plans.family_risk(Fraction(1, 20), pairs))

    def test_wording_for_many_pairs(self):
        self.assertEqual(plans.all_pairs_text(0.9, 0.05, 8),
                         "each pair: if its true pass rate is below 90 %, it qualifies with chance "
                         "at most 5.0 %; all 8 pairs together: the chance that any pair whose true "
                         "pass rate is below 90 % qualifies is at most 40 %")

    def test_wording_for_one_pair_and_a_bound_past_certainty(self):
        self.assertEqual(plans.all_pairs_text(0.95, 0.047101, 1),
                         "the pair: if its true pass rate is below 95 %, it qualifies with chance "
                         "at most 4.8 %")
        self.assertTrue(plans.all_pairs_text(0.9, 0.05, 30).endswith("is at most 100 %"))


class RepeatsTest(unittest.TestCase):
    def test_what_n_of_n_passes_prove(self):
        for repeats, percent in ((1, "5.0"), (3, "36.8"), (10, "74.1"), (29, "90.1")):
            with self.subTest(repeats=repeats):
                self.assertEqual(plans.percent_down(plans.repeats_bound(repeats, 0.95)), percent)

    def test_detectable_rate(self):
        for repeats, percent in ((1, "20.0"), (3, "58.4"), (10, "85.1")):
            with self.subTest(repeats=repeats):
                rate = plans.detectable_rate(repeats)
                self.assertAlmostEqual(1 - rate ** repeats, 0.8, places=12)
                self.assertEqual(plans.percent_down(rate), percent)
                # the printed rate, rounded down, is caught at least 80 % of the time
                self.assertGreaterEqual(1 - (Fraction(percent) / 100) ** repeats, Fraction(4, 5))


class RoundingTest(unittest.TestCase):
    def test_percent_down(self):
        for value, text in ((0.9, "90.0"), (0.90186, "90.1"), (0.1 + 0.2, "30.0"), (0.29, "29.0"),
                            (0.57, "57.0"), (0.999999, "99.9"), (1, "100.0"), (0, "0.0"),
                            (Fraction(1, 3), "33.3"), (Fraction(9, 10) - Fraction(1, 10 ** 30),
                                                       "89.9"),
                            (Decimal("0.0009999"), "0.0"), (1 - 0.9, "9.9")):
            with self.subTest(value=value):
                self.assertEqual(plans.percent_down(value), text)

    def test_risk_up(self):
        for value, text in ((0.047101, "4.8"), (0.00012345, "0.013"), (0.5, "50"), (0.05, "5.0"),
                            (Fraction(1, 20), "5.0"), (0.048, "4.8"), (0.0481, "4.9"),
                            (0.0996, "10"), (0.099, "9.9"), (0.9991, "100"), (1, "100"), (0, "0"),
                            (Fraction(1, 3), "34"), (0.0001, "0.010"),
                            (1 - 0.95, "5.1")):  # float noise above 5 %: rounded up, not down
            with self.subTest(value=value):
                self.assertEqual(plans.risk_up(value), text)

    def test_as_given(self):
        for value, text in ((0.9018, "90.18"), (0.95, "95"), (0.999, "99.9"), (0.9, "90"),
                            (1, "100"), (Decimal("0.90"), "90"), ("0.95", "95"),
                            (Fraction(17, 20), "85")):
            with self.subTest(value=value):
                self.assertEqual(plans.as_given(value), text)

    def test_usd_up(self):
        for value, text in ((Decimal("0.736"), "$0.736"), (Decimal("12"), "$12.00"),
                            (Decimal("0.00001"), "$0.0001"), (Fraction(1, 3), "$0.3334"),
                            (Decimal("1.5"), "$1.50")):
            with self.subTest(value=value):
                self.assertEqual(plans.usd_up(value), text)

    def test_negative_values_are_refused(self):
        for function in (plans.percent_down, plans.risk_up):
            with self.subTest(function=function.__name__), self.assertRaises(ValueError):
                function(-0.01)


class ProofLabelTest(unittest.TestCase):
    def test_labels(self):
        def proof(qualified, passed, runs):
            return {"qualified": qualified, "passed": passed, "runs": runs}
        for before, after, confidence, label in (
                (proof(True, 29, 29), proof(True, 29, 29), 0.95, "PASS"),
                (proof(True, 29, 29), proof(False, 3, 4), 0.95, "NEW_FAILURE"),
                (proof(False, 3, 4), proof(True, 29, 29), 0.95, "RECOVERED"),
                (proof(False, 25, 26), proof(False, 0, 1), 0.95, "STILL_FAILING"),  # p = 0.074
                (proof(False, 25, 26), proof(False, 0, 1), 0.9, "WORSE"),
                (proof(False, 2, 4), proof(False, 0, 12), 0.95, "WORSE"),  # p = 1/20 exactly
                (proof(False, 2, 2), proof(False, 0, 3), 0.9, "WORSE"),  # p = 1/10 exactly
                (proof(False, 1, 2), proof(False, 0, 12), 0.95, "STILL_FAILING"),
                (proof(False, 0, 1), proof(False, 25, 26), 0.95, "STILL_FAILING")):
            with self.subTest(before=before, after=after, confidence=confidence):
                self.assertEqual(plans.proof_label(before, after, confidence), label)

    def test_the_p_value_is_compare_runs_own(self):
        self.assertIs(plans.fisher_drop, compare_runs.fisher_drop)
        self.assertEqual(round(plans.fisher_drop(25, 26, 0, 1), 3), 0.074)
        self.assertEqual(plans.fisher_drop(2, 4, 0, 12), 0.05)


class PlanLinesTest(unittest.TestCase):
    def test_headline_of_a_proof_with_an_allowed_failure(self):
        self.assertEqual(plans.headline(MODELS, CASES, prove=0.9, allowed=1),
                         "Plan: prove >= 90 % at 95 % for 8 pairs (2 models x 4 cases), at most 1 "
                         "allowed failure each: 45 passes of at most 46 requests per pair, at most "
                         "368 requests.")

    def test_headline_of_a_proof_without_allowed_failures(self):
        self.assertEqual(plans.headline(["m"], ["a"], prove=0.95, confidence=0.9018),
                         "Plan: prove >= 95 % at 90.18 % for 1 pair (1 model x 1 case), no allowed "
                         "failure: 46 passes in a row per pair, at most 46 requests.")
        self.assertEqual(plans.plan_size(0.95, 0.9018, 0), 46)  # 0.95 ** 46 <= 0.0982 < 0.95 ** 45

    def test_headline_with_two_allowed_failures(self):
        self.assertIn("at most 2 allowed failures each: 59 passes of at most 61 requests per pair",
                      plans.headline(MODELS, CASES, prove=0.9, allowed=2))

    def test_headline_of_repeats(self):
        for models, cases, repeats, text in (
                (MODELS, CASES, 3, "Plan: 3 repeats of 8 pairs (2 models x 4 cases): 24 requests."),
                (["m"], ["a"], 1, "Plan: 1 repeat of 1 pair (1 model x 1 case): 1 request.")):
            with self.subTest(repeats=repeats):
                self.assertEqual(plans.headline(models, cases, repeats=repeats), text)

    def test_lines_of_a_proof(self):
        lines = plans.plan_lines(MODELS, CASES, prove=0.9, allowed=1,
                                 mean_cost={"m1": Decimal("0.004")})
        self.assertEqual(lines, [
            plans.headline(MODELS, CASES, prove=0.9, allowed=1),
            "per pair: at most 46 requests; qualifies at 45 passes, stops at 2 failures",
            "chance to qualify if the true pass rate is 95 %: 32.3 %; 99 %: 92.2 %; 99.9 %: 99.8 %",
            "risk: a pair whose true pass rate is 85 % or lower qualifies with chance at most "
            "0.52 %",
            "each pair: if its true pass rate is below 90 %, it qualifies with chance at most "
            "4.9 %; all 8 pairs together: the chance that any pair whose true pass rate is below "
            "90 % qualifies is at most 39 %",
            "expected requests per pair if its true pass rate is 99 %: 44.2 (rounded up)",
            "total: at most 368 requests",
            # 46 x 4 x $0.004; 44.1346 x 4 x $0.004 = 0.706153, rounded up
            "cost m1: at most $0.736 for 184 requests; expected $0.7062 if every pair's true pass "
            "rate is 99 %",
            "cost m2: unknown (no mean cost per request)"])

    def test_singular_forms_in_a_proof(self):
        lines = plans.plan_lines(["m"], ["a"], prove=0.95, mean_cost=Decimal("0.01"))
        self.assertEqual(lines[1], "per pair: at most 59 requests; qualifies at 59 passes, stops "
                                   "at 1 failure")
        self.assertTrue(lines[4].startswith("the pair: "))
        self.assertEqual(lines[-1], "cost m: at most $0.59 for 59 requests; expected $0.4474 if "
                                    "every pair's true pass rate is 99 %")

    def test_lines_of_repeats(self):
        self.assertEqual(plans.plan_lines(MODELS, CASES, repeats=3, mean_cost=Decimal("0.00123")), [
            "Plan: 3 repeats of 8 pairs (2 models x 4 cases): 24 requests.",
            "per pair: 3 requests; 3 of 3 passes would prove pass rate >= 36.8 % (95 %)",
            "a comparison against an all-passing run catches a pair whose true pass rate is "
            "58.4 % or lower with chance at least 80 %",
            "total: 24 requests",
            "cost m1: $0.0148 for 12 requests",
            "cost m2: $0.0148 for 12 requests"])

    def test_singular_forms_of_one_repeat(self):
        self.assertEqual(plans.plan_lines(["m"], ["a"])[1:], [
            "per pair: 1 request; 1 of 1 pass would prove pass rate >= 5.0 % (95 %)",
            "a comparison against an all-passing run catches a pair whose true pass rate is "
            "20.0 % or lower with chance at least 80 %",
            "total: 1 request"])

    def test_too_many_allowed_failures_are_refused_with_what_fits(self):
        with self.assertRaises(ValueError) as caught:
            plans.plan_lines(MODELS, CASES, prove=0.9, allowed=39)
        self.assertEqual(str(caught.exception),
                         "to prove 90 % at 95 % with 39 allowed failures a pair needs more than "
                         "500 requests; allow at most 38")
        with self.assertRaises(ValueError) as caught:
            plans.headline(MODELS, CASES, prove=0.995)
        self.assertIn("choose a lower rate or confidence", str(caught.exception))

    def test_allowed_failures_need_a_proof(self):
        with self.assertRaises(ValueError):
            plans.headline(MODELS, CASES, allowed=1, repeats=3)


# --------------------------------------------------------------------------
# vocabulary.py: the words every view shares (labels, p-values, usage errors).
# --------------------------------------------------------------------------


class VocabularyTest(unittest.TestCase):
    def test_what_each_label_means(self):
        for label, meaning in (
                ("NEW_FAILURE", "passed every time before, fails at least once now: the change "
                                "broke an approved decision"),
                ("WORSE", "failed some of the time before and fails more often now"),
                ("RECOVERED", "failed at least once before, passes every time now"),
                ("BETTER", "fails less often than before, but still fails"),
                ("PASS", "passed every time, before and now"),
                ("STILL_FAILING", "fails as often as before")):
            with self.subTest(label=label):
                self.assertEqual(vocabulary.MEANINGS[label], meaning)

    def test_p_values_are_never_written_as_zero(self):
        # three decimals from 0.001 up, exponent form below; "-" without a p-value
        for p_value, text in ((None, "-"), (0.001, "0.001"), (0.05, "0.050"), (1, "1.000"),
                              (0.0009, "9.0e-04"), (1e-10, "1.0e-10")):
            with self.subTest(p_value=p_value):
                self.assertEqual(vocabulary.p_text(p_value), text)


class ParserTest(unittest.TestCase):
    def parser(self, *flags):
        parser = vocabulary.Parser(prog="tool")
        for flag in flags:
            parser.add_argument(flag)
        return parser

    def usage_error(self, parser, args):
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors), self.assertRaises(SystemExit) as stop:
            parser.parse_args(args)
        self.assertEqual(stop.exception.code, 2)
        return errors.getvalue()

    def test_an_unknown_argument_is_a_one_line_usage_error(self):
        self.assertEqual(self.usage_error(self.parser("--out"), ["--zzzz"]),
                         "tool: error: unrecognized arguments: --zzzz\n")

    def test_a_mistyped_flag_names_the_closest_known_one(self):
        for args, hint in ((["--ouput"], "--ouput (did you mean --out?)"),
                           (["--ouput=x.json"], "--ouput=x.json (did you mean --out?)"),
                           (["-i"], "-i (did you mean --id?)")):  # two characters: still a flag
            with self.subTest(args=args):
                self.assertEqual(self.usage_error(self.parser("--out", "--models", "--id"), args),
                                 f"tool: error: unrecognized arguments: {hint}\n")

    def test_two_mistyped_flags_name_a_known_one_each(self):
        self.assertEqual(self.usage_error(self.parser("--out", "--models"), ["--ouput", "--modles"]),
                         "tool: error: unrecognized arguments: --ouput --modles (did you mean "
                         "--out for --ouput, --models for --modles?)\n")

    def test_a_mistyped_flag_is_given_only_the_closest_match(self):
        self.assertEqual(self.usage_error(self.parser("--model", "--models"), ["--modelz"]),
                         "tool: error: unrecognized arguments: --modelz (did you mean --model?)\n")

    def test_no_hint_for_what_is_not_a_flag(self):
        for args in (["-"], ["out"]):
            with self.subTest(args=args):
                self.assertEqual(self.usage_error(self.parser("--out"), args),
                                 f"tool: error: unrecognized arguments: {args[0]}\n")

    def test_control_characters_are_escaped_to_keep_one_line(self):
        for arg, shown in (("x\ny", "x\\ny"), ("a\x1b[31m", "a\\x1b[31m")):
            with self.subTest(arg=arg):
                self.assertEqual(self.usage_error(self.parser("--out"), [arg]),
                                 f"tool: error: unrecognized arguments: {shown}\n")


def closed_os(closed):
    """A stand-in for vocabulary's os on which the descriptors in `closed` are closed."""
    def fstat(number):
        if number in closed:
            raise OSError(9, "Bad file descriptor")
    fake = unittest.mock.Mock(devnull=os.devnull, O_RDWR=os.O_RDWR)
    fake.fstat.side_effect = fstat
    return fake


class StandardStreamsTest(unittest.TestCase):
    def test_each_closed_descriptor_is_opened_on_dev_null(self):
        for closed in ((), (0,), (1,), (0, 2), (0, 1, 2)):
            with self.subTest(closed=closed):
                fake = closed_os(set(closed))
                with unittest.mock.patch.object(vocabulary, "os", fake):
                    vocabulary.mend_standard_streams()
                self.assertEqual(fake.open.call_args_list,
                                 [unittest.mock.call(os.devnull, os.O_RDWR)] * len(closed))

    def mended_stderr(self, stderr):
        """sys.stderr after mending a closed descriptor 2 while sys.stderr was `stderr`;
        closed, and descriptor 2 put back, at the test's end."""
        saved = os.dup(2)
        self.addCleanup(os.close, saved)
        self.addCleanup(os.dup2, saved, 2)
        with unittest.mock.patch.object(vocabulary, "os", closed_os({2})), \
                unittest.mock.patch.object(sys, "stderr", stderr):
            vocabulary.mend_standard_streams()
            mended = sys.stderr
        if mended is not stderr:
            self.addCleanup(mended.close)
        return mended

    def test_a_missing_sys_stderr_becomes_a_text_stream_on_descriptor_2(self):
        mended = self.mended_stderr(None)
        self.assertIsInstance(mended, io.TextIOWrapper)
        self.assertEqual((mended.fileno(), mended.mode, mended.encoding), (2, "w", "utf-8"))

    def test_closing_the_new_stream_leaves_descriptor_2_open(self):
        mended = self.mended_stderr(None)
        mended.close()
        os.fstat(2)  # OSError if closing the stream closed the descriptor

    def test_an_existing_sys_stderr_is_kept(self):
        stream = io.StringIO()
        self.assertIs(self.mended_stderr(stream), stream)


if __name__ == "__main__":
    unittest.main()
