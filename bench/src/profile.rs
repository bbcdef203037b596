//! Where a routed request's instructions go: a copy of the module that counts the instructions
//! each of its functions runs, so the per-request figure splits into the steps that spend it.
//!
//! Fuel says how many instructions a callback ran, not in which function. The copy made here
//! gives every defined function an `i64` global and one export that reads it; before each
//! straight run of the function's instructions, the global grows by the run's instructions that
//! wasmtime's fuel counts (all but `nop`, `drop`, `block`, `loop`, `unreachable`, `return`,
//! `else` and `end`), so the copy stays close to the original's size and speed. The counts are each
//! function's own instructions, not its callees'. They are bumped only while a request's
//! callback runs ([`crate::callbacks::REQUEST_CALLBACKS`], each exported through a wrapper that
//! sets a flag global the bumps add): the ticks' work is not a request's, and what the host has
//! the module do inside a request's hostcall (allocate the bytes it hands over) is. Function names come from the module's `name`
//! section, which the shipped module does not carry: `make bench` builds a named copy for this
//! (`target/upcheck.named.wasm`: the same build and wasm-opt, names kept), so the functions are
//! the shipped ones, inlined as they are there.

use crate::callbacks::REQUEST_CALLBACKS;
use crate::rewrite::{self, Additions, Outline};
use anyhow::Result;
use wasm_encoder::{
    CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
    GlobalType, Instruction, TypeSection, ValType,
};
use wasmparser::Operator;

/// The export that reads the instructions defined function `i` (counted from the first defined
/// function) has run.
pub fn counter_export(i: u32) -> String {
    format!("upcheck_bench_instructions:{i}")
}

/// A counting copy of a module.
pub struct Counting {
    /// The module, with [`counter_export`] for each defined function.
    pub wasm: Vec<u8>,
    /// Each defined function's name (`#INDEX` where the module names none), in order.
    pub functions: Vec<String>,
}

/// Where the additions go, after what the module has ([`Outline`]).
struct Layout {
    outline: Outline,
    /// The request callbacks exported: name, function index.
    callbacks: Vec<(String, u32)>,
}

impl Layout {
    fn read(wasm: &[u8]) -> Result<Layout> {
        let outline = Outline::read(wasm)?;
        let callbacks = outline
            .exports
            .iter()
            .filter(|(name, _)| REQUEST_CALLBACKS.contains(&name.as_str()))
            .cloned()
            .collect();
        Ok(Layout { outline, callbacks })
    }

    /// The flag global, 1 while a request's callback runs: after every global.
    fn flag(&self) -> u32 {
        self.outline.globals
    }

    /// The counter of defined function `i`: after the flag.
    fn counter(&self, i: u32) -> u32 {
        self.outline.globals + 1 + i
    }

    /// The first counter reader: after every defined function.
    fn readers(&self) -> u32 {
        self.outline.imported() + self.outline.functions()
    }

    /// The wrapper of request callback `k`: after the readers.
    fn callback_wrapper(&self, k: u32) -> u32 {
        self.readers() + self.outline.functions() + k
    }
}

/// Whether wasmtime's fuel counts `op` (it does not count the ones that compile to nothing).
fn fueled(op: &Operator) -> bool {
    !matches!(
        op,
        Operator::Nop
            | Operator::Drop
            | Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::Unreachable
            | Operator::Return
            | Operator::Else
            | Operator::End
    )
}

/// Whether control may arrive right after `op` from elsewhere, or leave at it: the end of a run.
fn ends_run(op: &Operator) -> bool {
    matches!(
        op,
        Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::Else
            | Operator::End
            | Operator::Br { .. }
            | Operator::BrIf { .. }
            | Operator::BrTable { .. }
            | Operator::Return
            | Operator::Unreachable
            | Operator::Call { .. }
            | Operator::CallIndirect { .. }
            | Operator::ReturnCall { .. }
            | Operator::ReturnCallIndirect { .. }
    )
}

/// Whether `op` may be reached from elsewhere than the instruction before it (the start of an
/// `else` arm, the end of a block a branch leaves): it starts a run of its own.
fn starts_run(op: &Operator) -> bool {
    matches!(op, Operator::Else | Operator::End)
}

/// The additions: a flag global, a counter global per defined function bumped before each of
/// its runs, their readers, and a wrapper per request callback that raises the flag.
impl Additions for Layout {
    fn types(&self, types: &mut TypeSection) {
        types.ty().function([], [ValType::I64]);
    }

    fn functions(&self, functions: &mut FunctionSection) {
        for _ in 0..self.outline.functions() {
            functions.function(self.outline.types());
        }
        for (_, function) in &self.callbacks {
            functions.function(self.outline.type_of(*function).unwrap_or_default());
        }
    }

    fn globals(&self, globals: &mut GlobalSection) {
        let counter = GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        globals.global(counter, &ConstExpr::i64_const(0)); // the flag
        for _ in 0..self.outline.functions() {
            globals.global(counter, &ConstExpr::i64_const(0));
        }
    }

    fn exports(&self, exports: &mut ExportSection) {
        for i in 0..self.outline.functions() {
            exports.export(&counter_export(i), ExportKind::Func, self.readers() + i);
        }
    }

    /// One bump per straight run of instructions, before it: the run's count times the flag. A
    /// run ends where control may leave or enter it; its last instruction (a branch, a call)
    /// still runs once the run has started.
    fn body(&self, defined: u32, body: &[(Operator<'_>, Instruction<'_>)], f: &mut Function) {
        let counter = self.counter(defined);
        let mut run: Vec<&Instruction> = Vec::new();
        let mut fueled_in_run = 0i64;
        let flush = |f: &mut Function, run: &mut Vec<&Instruction>, fueled: &mut i64| {
            if *fueled > 0 {
                f.instruction(&Instruction::GlobalGet(counter));
                f.instruction(&Instruction::GlobalGet(self.flag()));
                f.instruction(&Instruction::I64Const(*fueled));
                f.instruction(&Instruction::I64Mul);
                f.instruction(&Instruction::I64Add);
                f.instruction(&Instruction::GlobalSet(counter));
            }
            for instruction in run.drain(..) {
                f.instruction(instruction);
            }
            *fueled = 0;
        };
        for (op, instruction) in body {
            if starts_run(op) {
                flush(f, &mut run, &mut fueled_in_run);
            }
            fueled_in_run += i64::from(fueled(op));
            run.push(instruction);
            if ends_run(op) {
                flush(f, &mut run, &mut fueled_in_run);
            }
        }
        flush(f, &mut run, &mut fueled_in_run);
    }

    fn code(&self, code: &mut CodeSection) {
        for i in 0..self.outline.functions() {
            let mut reader = Function::new([]);
            reader.instruction(&Instruction::GlobalGet(self.counter(i)));
            reader.instruction(&Instruction::End);
            code.function(&reader);
        }
        // Callback wrapper: raise the flag, call the callback, put the flag back as it was (a
        // request's callback may run inside another's hostcall).
        for (_, function) in &self.callbacks {
            let ty = self.outline.type_of(*function).unwrap_or_default();
            let params = self.outline.params_of(ty).unwrap_or_default();
            let mut wrapper = Function::new([(1, ValType::I64)]);
            wrapper.instruction(&Instruction::GlobalGet(self.flag()));
            wrapper.instruction(&Instruction::LocalSet(params));
            wrapper.instruction(&Instruction::I64Const(1));
            wrapper.instruction(&Instruction::GlobalSet(self.flag()));
            for param in 0..params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(*function));
            wrapper.instruction(&Instruction::LocalGet(params));
            wrapper.instruction(&Instruction::GlobalSet(self.flag()));
            wrapper.instruction(&Instruction::End);
            code.function(&wrapper);
        }
    }

    /// A request callback is exported as its wrapper.
    fn wrapper(&self, name: &str) -> Option<u32> {
        (0..)
            .zip(&self.callbacks)
            .find(|(_, (callback, _))| callback == name)
            .map(|(k, _)| self.callback_wrapper(k))
    }
}

/// The counting copy of `wasm` (see the module docs).
pub fn counting(wasm: &[u8]) -> Result<Counting> {
    let layout = Layout::read(wasm)?;
    let wasm = rewrite::copy(wasm, &layout)?;
    let outline = &layout.outline;
    let functions = (0..outline.functions())
        .map(|i| {
            let index = outline.imported() + i;
            outline
                .names
                .get(&index)
                .cloned()
                .unwrap_or_else(|| format!("#{index}"))
        })
        .collect();
    Ok(Counting { wasm, functions })
}

/// A function's own instructions per request.
#[derive(Clone, Debug)]
pub struct Spent {
    /// Its name, demangled as far as the name section allows.
    pub function: String,
    /// Its instructions per request, callees not included.
    pub per_request: f64,
}

/// `functions`' counts, before and after `requests` requests, as the costliest first, those
/// under half an instruction per request left out.
pub fn spent(functions: &[String], before: &[u64], after: &[u64], requests: u64) -> Vec<Spent> {
    let mut spent: Vec<Spent> = functions
        .iter()
        .zip(before.iter().zip(after))
        .map(|(function, (b, a))| Spent {
            function: short(function),
            per_request: a.saturating_sub(*b) as f64 / requests.max(1) as f64,
        })
        .filter(|s| s.per_request >= 0.5)
        .collect();
    spent.sort_by(|a, b| b.per_request.total_cmp(&a.per_request));
    spent
}

/// A Rust symbol demangled, without its hash and crate disambiguators.
fn short(name: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(name))
}
