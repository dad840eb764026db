// A small expression language for the conformance data in tests/planner/data/*.json: the
// cross-field rules of upstream frameworks (Megatron-LM's validate_args, DeepSpeed's config checks)
// are written there as expressions over argument values, and evaluated here.
//
//   expr  := or ('?' expr ':' expr)?        or := and ('||' and)*      and := not ('&&' not)*
//   not   := '!' not | cmp                   cmp := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
//   sum   := prod (('+'|'-') prod)*          prod := unary (('*'|'/'|'%') unary)*
//   unary := '-' unary | atom                atom := number | 'string' | name | name '(' args ')' | '(' expr ')'
//
// Functions: set(name) (the name has a value: given on the command line, or derived), has(list,
// 'item'). Booleans count as 0/1 in arithmetic. A name with no value is null; arithmetic or an
// ordering on null is an error (the data must guard it with set()), so a rule never passes by
// accident. && and || short-circuit, and ?: evaluates only the branch taken, as in C.
#pragma once
#include <cctype>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::test {

struct RuleValue {
    enum Kind { null, boolean, number, string, list } kind = null;
    bool b = false;
    double n = 0;
    std::string s;
    std::vector<std::string> items;

    static RuleValue of(bool v) { RuleValue r; r.kind = boolean; r.b = v; return r; }
    static RuleValue of(double v) { RuleValue r; r.kind = number; r.n = v; return r; }
    static RuleValue of(std::string v) { RuleValue r; r.kind = string; r.s = std::move(v); return r; }
    static RuleValue of(std::vector<std::string> v) { RuleValue r; r.kind = list; r.items = std::move(v); return r; }
    bool truthy() const {
        switch (kind) {
            case null: return false;
            case boolean: return b;
            case number: return n != 0;
            case string: return !s.empty();
            case list: return !items.empty();
        }
        return false;
    }
};

/// Evaluates one expression; `lookup` gives a name's value (null when it has none).
class RuleExpr {
public:
    RuleExpr(std::string text, std::function<RuleValue(const std::string&)> lookup) : t_(std::move(text)), lookup_(std::move(lookup)) {}

    RuleValue eval() {
        RuleValue v = expr();
        skip();
        if (i_ != t_.size()) fail("unexpected text");
        return v;
    }

private:
    std::string t_;
    std::size_t i_ = 0;
    std::function<RuleValue(const std::string&)> lookup_;
    int dead_ = 0;  ///< > 0 while parsing a branch whose value cannot matter (short-circuit)

    [[noreturn]] void fail(const std::string& why) const {
        throw std::runtime_error("rule \"" + t_ + "\": " + why + " at offset " + std::to_string(i_));
    }
    void skip() {
        while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
    }
    bool eat(const std::string& op) {
        skip();
        if (t_.compare(i_, op.size(), op) != 0) return false;
        // "<" must not eat the start of "<=", "!" not of "!=", "=" never alone
        if ((op == "<" || op == ">" || op == "!") && i_ + 1 < t_.size() && t_[i_ + 1] == '=') return false;
        i_ += op.size();
        return true;
    }
    double num(const RuleValue& v) const {
        if (dead_ > 0) return 1;
        if (v.kind == RuleValue::number) return v.n;
        if (v.kind == RuleValue::boolean) return v.b ? 1 : 0;
        fail("a number is needed (got " + std::string(v.kind == RuleValue::null ? "a name with no value" : "a string or list") + ")");
    }

    RuleValue expr() {
        RuleValue c = disj();
        if (!eat("?")) return c;
        const bool take_a = c.truthy();
        dead_ += take_a ? 0 : 1;
        RuleValue a = expr();
        dead_ -= take_a ? 0 : 1;
        if (!eat(":")) fail("'?' without ':'");
        dead_ += take_a ? 1 : 0;
        RuleValue b = expr();
        dead_ -= take_a ? 1 : 0;
        return take_a ? a : b;
    }
    RuleValue disj() {
        RuleValue v = conj();
        while (eat("||")) {
            const bool decided = v.truthy();
            dead_ += decided;
            RuleValue r = conj();
            dead_ -= decided;
            v = RuleValue::of(decided || r.truthy());
        }
        return v;
    }
    RuleValue conj() {
        RuleValue v = neg();
        while (eat("&&")) {
            const bool decided = !v.truthy();
            dead_ += decided;
            RuleValue r = neg();
            dead_ -= decided;
            v = RuleValue::of(!decided && r.truthy());
        }
        return v;
    }
    RuleValue neg() {
        if (eat("!")) return RuleValue::of(!neg().truthy());
        return cmp();
    }
    RuleValue cmp() {
        RuleValue a = sum();
        for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
            if (!eat(op)) continue;
            RuleValue b = sum();
            const std::string o = op;
            if (o == "==" || o == "!=") {
                bool eq;
                if (a.kind == RuleValue::string || b.kind == RuleValue::string) eq = a.kind == b.kind && a.s == b.s;
                else if (a.kind == RuleValue::null || b.kind == RuleValue::null) eq = a.kind == b.kind;
                else eq = num(a) == num(b);
                return RuleValue::of(o == "==" ? eq : !eq);
            }
            const double x = num(a), y = num(b);
            return RuleValue::of(o == "<" ? x < y : o == "<=" ? x <= y : o == ">" ? x > y : x >= y);
        }
        return a;
    }
    RuleValue sum() {
        RuleValue v = prod();
        for (;;) {
            if (eat("+")) v = RuleValue::of(num(v) + num(prod()));
            else if (eat("-")) v = RuleValue::of(num(v) - num(prod()));
            else return v;
        }
    }
    RuleValue prod() {
        RuleValue v = unary();
        for (;;) {
            if (eat("*")) {
                v = RuleValue::of(num(v) * num(unary()));
            } else if (eat("/")) {
                const double d = num(unary());
                if (d == 0 && dead_ == 0) fail("division by zero");
                v = RuleValue::of(d == 0 ? 0 : std::floor(num(v) / d));  // Python's // on the integers the rules use
            } else if (eat("%")) {
                const double d = num(unary());
                if (d == 0 && dead_ == 0) fail("modulo by zero");
                v = RuleValue::of(d == 0 ? 0 : std::fmod(num(v), d));
            } else {
                return v;
            }
        }
    }
    RuleValue unary() {
        if (eat("-")) return RuleValue::of(-num(unary()));
        return atom();
    }
    std::string name() {
        skip();
        std::string n;
        while (i_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_' || t_[i_] == '.')) n += t_[i_++];
        if (n.empty()) fail("a name is expected");
        return n;
    }
    RuleValue atom() {
        skip();
        if (i_ >= t_.size()) fail("unexpected end");
        if (eat("(")) {
            RuleValue v = expr();
            if (!eat(")")) fail("')' expected");
            return v;
        }
        if (t_[i_] == '\'') {
            const std::size_t end = t_.find('\'', i_ + 1);
            if (end == std::string::npos) fail("unterminated string");
            RuleValue v = RuleValue::of(t_.substr(i_ + 1, end - i_ - 1));
            i_ = end + 1;
            return v;
        }
        if (std::isdigit(static_cast<unsigned char>(t_[i_]))) {
            std::size_t used = 0;
            const double v = std::stod(t_.substr(i_), &used);
            i_ += used;
            return RuleValue::of(v);
        }
        const std::string n = name();
        if (n == "true" || n == "false") return RuleValue::of(n == "true");
        if (!eat("(")) return lookup_(n);
        if (n == "set") {
            const RuleValue v = lookup_(name());
            if (!eat(")")) fail("')' expected");
            return RuleValue::of(v.kind != RuleValue::null);
        }
        if (n == "has") {
            const RuleValue l = lookup_(name());
            if (!eat(",")) fail("',' expected");
            const RuleValue item = atom();
            if (!eat(")")) fail("')' expected");
            for (const auto& s : l.items)
                if (s == item.s) return RuleValue::of(true);
            return RuleValue::of(false);
        }
        fail("unknown function " + n);
    }
};

}  // namespace strata::test
