// Thin nanobind layer over the matcher core: converts types, maps errors to
// Python exceptions and releases the GIL while the core works.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "util/errors.hpp"
#include "matcher.hpp"
#include "policies/policy.hpp"
#include "jobspec/yaml_subset.hpp"

namespace nb = nanobind;
using namespace fluxion;

NB_MODULE(_core, m) {
    m.doc() = "Fluxion-compatible resource graph matcher (C++ core).";
    // A server's graph lives as long as its process: threads that still hold it when
    // the interpreter exits are not leaks worth a warning on every shutdown.
    nb::set_leak_warnings(false);

    auto input_error = nb::exception<InputError>(m, "InputError", PyExc_ValueError);
    // Registered after its base, so that it is the one raised.
    nb::exception<UnknownTypeError>(m, "UnknownTypeError", input_error);
    nb::exception<NotFoundError>(m, "NotFoundError", PyExc_LookupError);
    nb::exception<StateError>(m, "StateError", PyExc_RuntimeError);

    nb::class_<AllocatedVertex>(m, "AllocatedVertex")
        .def_ro("path", &AllocatedVertex::path)
        .def_ro("type", &AllocatedVertex::type)
        .def_ro("name", &AllocatedVertex::name)
        .def_ro("id", &AllocatedVertex::id)
        .def_ro("rank", &AllocatedVertex::rank)
        .def_ro("amount", &AllocatedVertex::amount)
        .def_ro("exclusive", &AllocatedVertex::exclusive)
        .def_ro("node", &AllocatedVertex::node)
        .def_ro("properties", &AllocatedVertex::properties);

    nb::class_<MatchResult>(m, "MatchResult")
        .def_ro("status", &MatchResult::status)
        .def_ro("jobid", &MatchResult::jobid)
        .def_ro("at", &MatchResult::at)
        .def_ro("duration", &MatchResult::duration)
        .def_ro("overhead", &MatchResult::overhead)
        .def_ro("R", &MatchResult::R)
        .def_ro("error", &MatchResult::error)
        .def_prop_ro("emitted", [](const MatchResult &r) { return r.emitted.size(); })
        .def_ro("preorder", &MatchResult::preorder)
        .def_ro("postorder", &MatchResult::postorder);

    nb::class_<JobRecord>(m, "JobRecord")
        .def_ro("jobid", &JobRecord::jobid)
        .def_ro("state", &JobRecord::state)
        .def_ro("at", &JobRecord::at)
        .def_ro("duration", &JobRecord::duration)
        .def_ro("overhead", &JobRecord::overhead)
        .def_ro("R", &JobRecord::R);

    nb::class_<Matcher::Usage>(m, "Usage")
        .def_ro("path", &Matcher::Usage::path)
        .def_ro("type", &Matcher::Usage::type)
        .def_ro("name", &Matcher::Usage::name)
        .def_ro("size", &Matcher::Usage::size)
        .def_ro("used", &Matcher::Usage::used);

    nb::class_<Matcher>(m, "Matcher")
        .def(
            "__init__",
            [](Matcher *self, nb::handle jgf, const std::string &policy,
               const std::string &prune_filters, const std::string &match_format,
               const std::set<std::string> &partial_pool_types, const std::string &traverser,
               const std::string &subsystems, bool keep_canceled, bool carry_unprinted_schedule) {
                MatcherOptions o{policy, prune_filters, match_format, partial_pool_types, traverser,
                                 subsystems};
                o.keep_canceled = keep_canceled;
                o.carry_unprinted_schedule = carry_unprinted_schedule;
                // Read the JGF text in place: a large graph's text is ~100 MB.
                // The caller's reference keeps the (immutable) object alive.
                std::string_view text;
                if (PyUnicode_Check(jgf.ptr())) {
                    Py_ssize_t n = 0;
                    const char *p = PyUnicode_AsUTF8AndSize(jgf.ptr(), &n);
                    if (!p) throw nb::python_error();
                    text = std::string_view(p, static_cast<size_t>(n));
                } else if (PyBytes_Check(jgf.ptr())) {
                    char *p = nullptr;
                    Py_ssize_t n = 0;
                    if (PyBytes_AsStringAndSize(jgf.ptr(), &p, &n) != 0) throw nb::python_error();
                    text = std::string_view(p, static_cast<size_t>(n));
                } else {
                    throw nb::type_error("jgf must be str or bytes");
                }
                nb::gil_scoped_release release;
                new (self) Matcher(text, o);
            },
            nb::arg("jgf"), nb::arg("policy") = "first", nb::arg("prune_filters") = "ALL:core,ALL:node",
            nb::arg("match_format") = "jgf", nb::arg("partial_pool_types") = std::set<std::string>(),
            nb::arg("traverser") = "simple", nb::arg("subsystems") = "CA",
            nb::arg("keep_canceled") = true, nb::arg("carry_unprinted_schedule") = false)
        .def("match", &Matcher::match, nb::arg("jobspec_json"), nb::arg("op") = "allocate",
             nb::arg("jobid") = nb::none(), nb::arg("format") = "", nb::arg("now") = 0,
             nb::call_guard<nb::gil_scoped_release>())
        .def("update_allocate", &Matcher::update_allocate, nb::arg("jobid"), nb::arg("R"), nb::arg("at"),
             nb::arg("duration"), nb::arg("reserve") = false, nb::arg("format") = "", nb::arg("reader") = "",
             nb::arg("now") = 0, nb::call_guard<nb::gil_scoped_release>())
        .def("hold", &Matcher::hold, nb::arg("jobid"), nb::arg("holdings"), nb::arg("at"), nb::arg("duration"),
             nb::call_guard<nb::gil_scoped_release>())
        .def("cancel", &Matcher::cancel, nb::arg("jobid"), nb::arg("noent_ok") = false,
             nb::call_guard<nb::gil_scoped_release>())
        .def("partial_cancel", &Matcher::partial_cancel, nb::arg("jobid"), nb::arg("paths"),
             nb::call_guard<nb::gil_scoped_release>())
        .def("partial_cancel_r", &Matcher::partial_cancel_r, nb::arg("jobid"), nb::arg("R"), nb::arg("format") = "jgf",
             nb::call_guard<nb::gil_scoped_release>())
        .def(
            "describe",
            [](const Matcher &mt, const MatchResult &r) {
                std::vector<AllocatedVertex> out;
                {
                    nb::gil_scoped_release release;
                    out = mt.describe(r.emitted);
                }
                return out;
            },
            nb::arg("result"))
        .def(
            "held_by_node",
            [](const Matcher &mt, const MatchResult &r) {
                Matcher::NodeHoldings out;
                {
                    nb::gil_scoped_release release;
                    out = mt.held_by_node(r.emitted);
                }
                return out;
            },
            nb::arg("result"))
        .def("info", &Matcher::info, nb::arg("jobid"))
        .def("jobs", &Matcher::jobs)
        .def("stat",
             [](const Matcher &mt) {
                 GraphStats s = mt.stat();
                 return std::map<std::string, int64_t>{{"vertices", s.vertices}, {"edges", s.edges}, {"jobs", s.jobs}};
             })
        .def("next_jobid", &Matcher::next_jobid)
        .def("set_next_jobid", &Matcher::set_next_jobid, nb::arg("id"))
        .def("set_status", &Matcher::set_status, nb::arg("path"), nb::arg("up"))
        .def("get_status", &Matcher::get_status, nb::arg("path"))
        .def("set_property", &Matcher::set_property, nb::arg("path"), nb::arg("key"), nb::arg("value"))
        .def("get_property", &Matcher::get_property, nb::arg("path"))
        .def("uniq_id", &Matcher::uniq_id, nb::arg("path"))
        .def("attach", &Matcher::attach, nb::arg("jgf"), nb::call_guard<nb::gil_scoped_release>())
        .def("remove", &Matcher::remove, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
        .def("remove_ranks", &Matcher::remove_ranks, nb::arg("idset"), nb::call_guard<nb::gil_scoped_release>())
        .def("usage", &Matcher::usage, nb::arg("at") = 0)
        .def("find", &Matcher::find, nb::arg("criteria"), nb::arg("format") = "",
             nb::call_guard<nb::gil_scoped_release>())
        .def("traversal_counts", &Matcher::traversal_counts)
        .def_prop_ro("policy", &Matcher::policy)
        .def_prop_ro("traverser", &Matcher::traverser,
                     nb::for_getter(nb::sig("def traverser(self, /) -> typing.Literal['simple', 'flexible']")))
        .def_prop_rw("match_format", &Matcher::match_format, &Matcher::set_match_format);

    m.def("policies", &Policy::names);
    m.def(
        "yaml_to_json",
        [](nb::str text) -> std::optional<std::string> {
            Py_ssize_t n = 0;
            const char *p = PyUnicode_AsUTF8AndSize(text.ptr(), &n);
            if (!p) {
                // Lone surrogates have no UTF-8 form; the full YAML parser reports them.
                PyErr_Clear();
                return std::nullopt;
            }
            std::string out;
            if (!yaml_subset_to_json(std::string_view(p, static_cast<size_t>(n)), out)) return std::nullopt;
            return out;
        },
        nb::arg("text"));
    // How the reader's error for a JGF bringing a second root begins.
    m.attr("DUPLICATE_ROOT_ERROR") = kDuplicateRoot;
}
