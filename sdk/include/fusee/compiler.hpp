// Which compilers the SDK supports, enforced here so that a compiler that
// would miscompile workflow code stops the build instead (docs/compilers.md).
//
//  - clang 14 and later: supported.
//  - GCC 12 and later: supported with one rule. GCC (12.2 as Debian 12 ships
//    it, and later versions until one is shown to be fixed) destroys twice
//    an object aggregate-initialized as a temporary inside a co_await
//    expression when it has a destructor to run -- a lambda's closure, as
//    in `co_await ctx.step("x", [text] { ... })`, or a struct written
//    `Order{...}` -- after copying it bytewise, which corrupts the heap.
//    Temporaries made by a constructor or returned by a call are handled
//    correctly, and so are named objects. With FUSEE_REFUSE_BRACED_TEMPORARIES,
//    the calls that take such an argument (Ctx::step's function,
//    Ctx::child's input, Stream::write's chunk) refuse a temporary that may
//    be one, at compile time, saying to name it first.
//  - Older GCC and clang: refused; their coroutines are less mature still.
#pragma once

#if defined(__clang__)
#if __clang_major__ < 14
#error "Fusee needs clang 14 or later (or GCC 12 or later): see docs/compilers.md"
#endif
#define FUSEE_REFUSE_BRACED_TEMPORARIES 0
#elif defined(__GNUC__)
#if __GNUC__ < 12
#error "Fusee needs GCC 12 or later (or clang 14 or later): older GCC miscompiles coroutines; see docs/compilers.md"
#endif
#define FUSEE_REFUSE_BRACED_TEMPORARIES 1
#else
#error "Fusee supports clang 14+ and GCC 12+ only: see docs/compilers.md"
#endif

// The refusal's words, for a value argument (a step function has its own).
#define FUSEE_NAME_IT_FIRST(what)                                                                              \
  "fusee: with GCC, " what " written as a braced temporary inside co_await (Order{...}) must not own anything " \
  "with a destructor: GCC destroys that temporary twice and corrupts the heap. Name it first -- Order order{...}; " \
  "co_await ctx.child(kShip, id, order); -- or build with clang++ 14 or later. See docs/compilers.md."
