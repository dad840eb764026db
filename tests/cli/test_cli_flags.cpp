// The command line's flag parsing, fuzzed (issue #32: non-positive values were silently replaced by
// defaults, and nothing fuzzed the parsing). The real application (every registered command,
// cli/app.cpp's build_app) with its commands' actions switched off is fed random command lines
// built from its own commands and options and hostile values. Properties:
//   - every numeric option of every command declares its range (CLI::Range, which --help shows as
//     "in [lo - hi]"; cli.hpp's add_int_option / add_num_option), so a new command cannot forget
//     one. A seed is exempt: any value of its type is one;
//   - a parse either fails with CLI::ParseError (exit 2) or leaves every numeric option it set
//     finite and inside its range; never another exception, never a crash (this test also runs
//     under ASan+UBSan);
//   - unknown_command never fails on any word sequence.
// Seeded, so a failure reproduces; the seed and the command line are printed.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "cli.hpp"

using namespace strata::cli;

namespace {

void walk(CLI::App* app, const std::function<void(CLI::App*)>& fn) {
    fn(app);
    for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) walk(sub, fn);
}

bool numeric_type(const std::string& type) {
    for (const char* t : {"INT", "UINT", "FLOAT", "NUMBER", "DOUBLE"})
        if (type.rfind(t, 0) == 0) return true;
    return false;
}

struct Range {
    double lo, hi;
};

// The range CLI::Range put into the option's type name ("INT:INT in [1 - 1024]").
std::optional<Range> range_of(const CLI::Option* o) {
    static const std::regex in(R"(in \[([^\] ]+) - ([^\] ]+)\])");
    std::smatch m;
    const std::string type = o->get_type_name();
    if (!std::regex_search(type, m, in)) return std::nullopt;
    return Range{std::stod(m[1].str()), std::stod(m[2].str())};
}

bool exempt(const CLI::Option* o) { return o->get_name() == "--seed"; }

// The commands' actions, taken out of their applications so that a parse runs none of them, and
// kept: they own the state (shared_ptr) their options write into. CLI11 has no getter for them;
// a pointer to the protected member, formed in a derived class, reaches them legally.
struct CallbackAccess : CLI::App {
    static std::function<void()>& of(CLI::App& a) { return a.*(&CallbackAccess::final_callback_); }
};

struct Cli {
    CLI::App app{"strata"};
    std::vector<CLI::App*> commands;  // every command and nested command
    std::vector<std::function<void()>> actions;
    Cli() {
        build_app(app);
        walk(&app, [&](CLI::App* a) {
            actions.push_back(std::move(CallbackAccess::of(*a)));
            CallbackAccess::of(*a) = nullptr;  // parse only: nothing runs
            if (a != &app) commands.push_back(a);
        });
    }
};

const std::vector<std::string> kValues = {
    "-1", "0", "1", "2", "7", "100", "1024", "1025", "65536", "1048576", "1048577", "2147483647", "2147483648",
    "-2147483648", "-2147483649", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
    "1e3", "1e309", "-1e309", "nan", "inf", "-inf", "-0", "0x10", "010", "1.5", "-2.5", " 3", "3 ", "", "abc",
    "-", "--", "1/2", "0/1", "2T", "30d", "H100-SXM5-80GB", "gpt2-124m", "/dev/null", "\xff\xfe", "1e-320"};

}  // namespace

TEST_CASE("every numeric option of every command declares its range", "[cli][flags]") {
    Cli cli;
    int numeric = 0;
    for (CLI::App* c : cli.commands)
        for (const CLI::Option* o : c->get_options()) {
            if (!numeric_type(o->get_type_name()) || exempt(o)) continue;
            ++numeric;
            INFO(c->get_name() << " " << o->get_name() << " " << o->get_type_name());
            const std::optional<Range> r = range_of(o);
            REQUIRE(r.has_value());  // use add_int_option / add_num_option (cli.hpp)
            CHECK(r->lo <= r->hi);
        }
    CHECK(numeric >= 15);  // plan, capacity, simulate, hwdb, profile, fidelity, import-hf, plan-merge
}

TEST_CASE("random command lines parse into range or fail with a parse error", "[cli][flags]") {
    Cli cli;
    const std::uint32_t seed = 32;
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)); };
    int parsed = 0, refused = 0;
    for (int iter = 0; iter < 40000; ++iter) {
        std::vector<std::string> args{"strata"};
        CLI::App* c = cli.commands[pick(cli.commands.size())];
        std::vector<std::string> path;
        for (CLI::App* a = c; a && a != &cli.app; a = a->get_parent()) path.insert(path.begin(), a->get_name());
        if (pick(20) != 0) args.insert(args.end(), path.begin(), path.end());
        const std::vector<CLI::Option*> opts = c->get_options();
        std::vector<const CLI::Option*> numeric;  // half the picks: the options with ranges
        for (const CLI::Option* o : opts)
            if (range_of(o)) numeric.push_back(o);
        const std::size_t n = pick(6);
        for (std::size_t k = 0; k < n; ++k) {
            const CLI::Option* o = !numeric.empty() && pick(2) == 0 ? numeric[pick(numeric.size())] : opts[pick(opts.size())];
            const std::string name = o->get_lnames().empty() ? (o->get_snames().empty() ? "" : "-" + o->get_snames()[0])
                                                             : "--" + o->get_lnames()[0];
            if (!name.empty() && name != "--help" && pick(10) != 0) args.push_back(name);
            if (pick(8) != 0) args.push_back(kValues[pick(kValues.size())]);
        }
        std::vector<const char*> argv;
        for (const std::string& a : args) argv.push_back(a.c_str());
        std::string line;
        for (const std::string& a : args) line += "'" + a + "' ";
        INFO("seed " << seed << ", iteration " << iter << ": " << line);
        std::string message;
        (void)unknown_command(cli.app, static_cast<int>(argv.size()), argv.data(), message);
        cli.app.clear();
        try {
            cli.app.parse(static_cast<int>(argv.size()), argv.data());
        } catch (const CLI::ParseError&) {
            ++refused;  // exit 2 (or help / version, exit 0)
            continue;
        }
        ++parsed;
        for (const CLI::Option* o : c->get_options()) {
            const std::optional<Range> r = range_of(o);
            if (!r || o->count() == 0) continue;
            const double v = o->as<double>();  // what the option's variable received
            INFO(o->get_name() << " = " << v);
            REQUIRE(std::isfinite(v));
            REQUIRE(v >= r->lo);
            REQUIRE(v <= r->hi);
        }
    }
    // Both outcomes happen (a driver that only ever fails to parse tests nothing).
    CHECK(parsed > 500);
    CHECK(refused > 500);
}
