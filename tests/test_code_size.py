#!/usr/bin/python3
"""The scanner of scripts/code-size on the C++ and Python it must not be fooled by.

Usage: test_code_size.py SOURCE_ROOT     Exit 0 = every case holds, 1 = one failed (each printed).
"""

import importlib.machinery
import importlib.util
import io
import sys
import tempfile
import textwrap
from contextlib import redirect_stdout
from pathlib import Path


def load_code_size(root):
    path = str(Path(root) / "scripts" / "code-size")
    loader = importlib.machinery.SourceFileLoader("code_size", path)
    spec = importlib.util.spec_from_loader("code_size", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# [what, C++ source, expected (name, first line, last line) of every definition, in order]
CPP_CASES = [
    ("a namespace body is a scope, not a function", """\
        namespace a {
        namespace {
        int f() {
          return 1;
        }
        }  // namespace
        }  // namespace a
        """, [("f", 3, 5)]),
    ("a class body is a scope; inline members and nested classes are found", """\
        template <typename T>
        class Box : public Base<void(int)> {
         public:
          explicit Box(T v) : v_(v) {}
          ~Box() { reset(); }
          struct Inner {
            int get() const noexcept { return 1; }
          };
         private:
          T v_;
        };
        """, [("Box", 4, 4), ("~Box", 5, 5), ("get", 7, 7)]),
    ("braces in comments, strings and char literals do not count", """\
        // void g() {
        /* } } */
        const char* f(char c) {
          if (c == '{' || c == '\\'' || c == '"') return "}\\"{";
          return R"x(}")x";  /* { */
        }
        """, [("f", 3, 6)]),
    ("a digit separator is not a char literal", """\
        int f() {
          int a[] = {1'000, 2};
          return a[0] + 0xFF'FF;
        }
        int g() { return '}'; }
        """, [("f", 1, 4), ("g", 5, 5)]),
    ("preprocessor lines are skipped; both branches of an #if are scanned", """\
        #define OPEN {
        #define LONG_MACRO(x) \\
          do { x; } while (0)
        #ifdef HAVE_X
        void f() {}
        #else
        void f() {
        }
        #endif
        """, [("f", 5, 5), ("f", 7, 8)]),
    ("a constructor's brace initializers are not its body", """\
        Foo::Foo(int a)
            : a_{a},
              b_(std::vector<int>{1, 2}),
              c_{} {
          init();
        }
        """, [("Foo::Foo", 1, 6)]),
    ("default arguments hold lambdas with ; and braces", """\
        void run(std::function<void()> g = [] { return; }, Opts o = {}) {
          g();
        }
        """, [("run", 1, 3)]),
    ("enum bodies, initializers and lambdas at namespace scope are not functions", """\
        enum class Kind : int { kA, kB };
        const int kTable[] = {1, 2, 3};
        std::vector<int> v{1, 2};
        auto lambda = [](int x) {
          return x;
        };
        struct Point kOrigin = {0, 0};
        int h(int x) { return x; }
        """, [("h", 8, 8)]),
    ("operators, qualified names, trailing return types, templates", """\
        bool operator==(const A& a, const A& b) { return a.v == b.v; }
        int Foo::operator()(int x) const { return x; }
        Foo& Foo::operator=(const Foo&) & { return *this; }
        template <typename T>
        auto ns::Bar<T>::twice(T x) -> decltype(x + x) {
          return x + x;
        }
        std::function<void(int)> make(int x) {
          return {};
        }
        """, [("operator==", 1, 1), ("Foo::operator()", 2, 2), ("Foo::operator=", 3, 3),
              ("ns::Bar<T>::twice", 5, 7), ("make", 8, 10)]),
    ("extern \"C\" is a scope; a function-like macro with a body is a function", """\
        extern "C" {
        int c_api(void) { return 0; }
        }
        PYBIND11_MODULE(_dscache, m) {
          m.def("f", [] { return 1; });
        }
        """, [("c_api", 2, 2), ("PYBIND11_MODULE", 4, 6)]),
    ("a function's length runs from its name's line to its closing brace", """\
        [[nodiscard]] static inline
        std::string
        long_name(int a,
                  int b) {
          struct Local {
            void m() {}
          };
          return {};
        }
        """, [("long_name", 3, 9)]),
    ("a doctest TEST_SUITE is a scope; its TEST_CASEs are functions with their SUBCASEs", """\
        namespace {
        int helper() { return 1; }
        }  // namespace
        TEST_SUITE("loader") {
        TEST_CASE("resume {") {
          SUBCASE("a") {
            CHECK(helper() == 1);
          }
          SUBCASE("b") { CHECK(true); }
        }
        TEST_CASE_FIXTURE(Fix,
                          "with a fixture") {
          CHECK(x_ == 0);
        }
        }
        """, [("helper", 2, 2), ('TEST_CASE("resume {")', 5, 10),
              ('TEST_CASE_FIXTURE(Fix, "with a fixture")', 11, 14)]),
    ("TEST_SUITE with decorators, TEST_SUITE_BEGIN/END, SCENARIO and TEST_CASE_TEMPLATE", """\
        TEST_SUITE("slow" * doctest::timeout(5) * doctest::skip(false)) {
        SCENARIO("a user resumes") { GIVEN("x") { CHECK(1); } }
        }
        TEST_SUITE_BEGIN("cli");
        TEST_CASE("a" * doctest::may_fail()) {
          CHECK(1);
        }
        TEST_SUITE_END();
        TEST_CASE_TEMPLATE("t", T, int, float) { CHECK(sizeof(T)); }
        """, [('SCENARIO("a user resumes")', 2, 2),
              ('TEST_CASE("a" * doctest::may_fail())', 5, 7),
              ('TEST_CASE_TEMPLATE("t", T, int, float)', 9, 9)]),
]

# [what, Python source, expected (qualified name, first line, last line)]
PY_CASES = [
    ("functions, methods, nested and async functions", """\
        import functools


        @functools.cache
        def f():
            def inner():
                return 1
            return inner()


        class C:
            async def m(self):
                return 2
        """, [("f", 5, 8), ("f.inner", 6, 7), ("C.m", 12, 13)]),
]


def run_report(module, root, *args):
    out = io.StringIO()
    with redirect_stdout(out):
        rc = module.main(["--root", str(root), *args])
    return rc, out.getvalue()


def main():
    module = load_code_size(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent)
    failures = []

    for what, src, want in CPP_CASES:
        got = module.cpp_functions(textwrap.dedent(src))
        if got != want:
            failures.append(f"C++: {what}:\n  want {want}\n  got  {got}")
    for what, src, want in PY_CASES:
        got = module.python_functions(textwrap.dedent(src))
        if got != want:
            failures.append(f"Python: {what}:\n  want {want}\n  got  {got}")

    # The report: limits are "over", not "at"; exit 1 only when something is over.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "libcache").mkdir()
        (root / "tools").mkdir()
        (root / "libcache" / "ok.h").write_text("int x;\n" * 500)
        body = "".join("  x();\n" for _ in range(118))
        (root / "tools" / "at_limit.cpp").write_text("void at() {\n" + body + "}\n")
        (root / "tools" / "build").mkdir()  # a build dir inside a root is not scanned
        (root / "tools" / "build" / "big.cpp").write_text("int y;\n" * 600)
        rc, out = run_report(module, root)
        if rc != 0 or "0 files over 500 lines, 0 functions over 120 lines (2 files" not in out:
            failures.append(f"report at the limits: rc {rc}, output:\n{out}")
        (root / "libcache" / "big.h").write_text("int x;\n" * 501)
        (root / "tools" / "over.py").write_text("def over():\n" + "    x()\n" * 120)
        rc, out = run_report(module, root)
        want = ["libcache/big.h: 501 lines", "tools/over.py:1: function over is 121 lines",
                "1 files over 500 lines, 1 functions over 120 lines (4 files scanned)"]
        if rc != 1 or any(w not in out for w in want):
            failures.append(f"report over the limits: rc {rc}, output:\n{out}")

    # A 300-line TEST_SUITE of short cases is not over; a 121-line TEST_CASE in it is.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "tests").mkdir()
        short = "".join(f'TEST_CASE("c{i}") {{\n  CHECK(true);\n}}\n' for i in range(100))
        suite = 'TEST_SUITE("s") {\n' + short + "}\n"
        (root / "tests" / "test_suite.cpp").write_text(suite)
        rc, out = run_report(module, root, "tests")
        if rc != 0 or "0 functions over 120 lines (1 files" not in out:
            failures.append(f"a long TEST_SUITE of short cases: rc {rc}, output:\n{out}")
        long_case = 'TEST_CASE("long") {\n' + "  CHECK(true);\n" * 119 + "}\n"
        (root / "tests" / "test_suite.cpp").write_text('TEST_SUITE("s") {\n' + short + long_case +
                                                        "}\n")
        rc, out = run_report(module, root, "tests")
        want = 'tests/test_suite.cpp:302: function TEST_CASE("long") is 121 lines'
        if rc != 1 or want not in out:
            failures.append(f"a long TEST_CASE in a TEST_SUITE: rc {rc}, output:\n{out}")

    for f in failures:
        print("FAIL", f)
    print(f"test_code_size: {len(CPP_CASES) + len(PY_CASES) + 4 - len(failures)} passed, "
          f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
