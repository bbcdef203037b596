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

use anyhow::{bail, Result};
use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
    GlobalType, Instruction, TypeSection, ValType,
};
use wasmparser::{ExternalKind, KnownCustom, Name, Operator, Parser, Payload, TypeRef};

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

/// What the first pass learns.
#[derive(Default)]
struct Layout {
    imported_functions: u32,
    globals: u32,
    types: u32,
    functions: u32,
    names: std::collections::BTreeMap<u32, String>,
    /// The type of each defined function.
    function_types: Vec<u32>,
    /// The parameter count of each type (0 for types that are not functions).
    params: Vec<u32>,
    /// The request callbacks exported: name, function index.
    callbacks: Vec<(String, u32)>,
}

impl Layout {
    fn read(wasm: &[u8]) -> Result<Layout> {
        let mut layout = Layout::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        match import?.ty {
                            TypeRef::Func(_) => layout.imported_functions += 1,
                            TypeRef::Global(_) => layout.globals += 1,
                            _ => {}
                        }
                    }
                }
                Payload::TypeSection(section) => {
                    for group in section {
                        for ty in group?.into_types() {
                            let params = match ty.composite_type.inner {
                                wasmparser::CompositeInnerType::Func(f) => f.params().len(),
                                _ => 0,
                            };
                            layout.params.push(u32::try_from(params)?);
                        }
                    }
                    layout.types = u32::try_from(layout.params.len())?;
                }
                Payload::FunctionSection(section) => {
                    layout.functions = section.count();
                    for ty in section {
                        layout.function_types.push(ty?);
                    }
                }
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export?;
                        if export.kind == ExternalKind::Func
                            && crate::callbacks::REQUEST_CALLBACKS.contains(&export.name)
                        {
                            layout
                                .callbacks
                                .push((export.name.to_owned(), export.index));
                        }
                    }
                }
                Payload::GlobalSection(section) => layout.globals += section.count(),
                Payload::CustomSection(section) => {
                    if let KnownCustom::Name(names) = section.as_known() {
                        for name in names {
                            if let Name::Function(map) = name? {
                                for naming in map {
                                    let naming = naming?;
                                    layout.names.insert(naming.index, naming.name.to_owned());
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(layout)
    }

    /// The flag global, 1 while a request's callback runs: after every global.
    fn flag(&self) -> u32 {
        self.globals
    }

    /// The counter of defined function `i`: after the flag.
    fn counter(&self, i: u32) -> u32 {
        self.globals + 1 + i
    }

    /// The first counter reader: after every defined function.
    fn readers(&self) -> u32 {
        self.imported_functions + self.functions
    }

    /// The wrapper of request callback `k`: after the readers.
    fn wrapper(&self, k: u32) -> u32 {
        self.readers() + self.functions + k
    }

    /// The type of function `index`, imported or defined.
    fn type_of(&self, index: u32) -> Option<u32> {
        let defined = index.checked_sub(self.imported_functions)?;
        self.function_types.get(defined as usize).copied()
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

struct Counter<'a> {
    layout: &'a Layout,
    /// The defined function whose body is being copied.
    next: u32,
    /// How many of the four sections the additions go into were seen.
    sections: usize,
}

type Error = reencode::Error<std::convert::Infallible>;

impl Reencode for Counter<'_> {
    type Error = std::convert::Infallible;

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_type_section(self, types, section)?;
        types.ty().function([], [ValType::I64]);
        self.sections += 1;
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_function_section(self, functions, section)?;
        for _ in 0..self.layout.functions {
            functions.function(self.layout.types);
        }
        for (_, function) in &self.layout.callbacks {
            functions.function(self.layout.type_of(*function).unwrap_or_default());
        }
        self.sections += 1;
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_global_section(self, globals, section)?;
        let counter = GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        globals.global(counter, &ConstExpr::i64_const(0)); // the flag
        for _ in 0..self.layout.functions {
            globals.global(counter, &ConstExpr::i64_const(0));
        }
        self.sections += 1;
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_export_section(self, exports, section)?;
        for i in 0..self.layout.functions {
            exports.export(
                &counter_export(i),
                ExportKind::Func,
                self.layout.readers() + i,
            );
        }
        self.sections += 1;
        Ok(())
    }

    fn parse_function_body(
        &mut self,
        code: &mut CodeSection,
        func: wasmparser::FunctionBody<'_>,
    ) -> Result<(), Error> {
        let counter = self.layout.counter(self.next);
        self.next += 1;
        let mut f = self.new_function_with_parsed_locals(&func)?;
        let mut reader = func.get_operators_reader()?;
        // One bump per straight run of instructions, before it: the run's count times the flag.
        // A run ends where control may leave or enter it; its last instruction (a branch, a
        // call) still runs once the run has started.
        let mut run: Vec<Instruction> = Vec::new();
        let mut fueled_in_run = 0i64;
        let flush = |f: &mut Function, run: &mut Vec<Instruction>, fueled: &mut i64| {
            if *fueled > 0 {
                f.instruction(&Instruction::GlobalGet(counter));
                f.instruction(&Instruction::GlobalGet(self.layout.flag()));
                f.instruction(&Instruction::I64Const(*fueled));
                f.instruction(&Instruction::I64Mul);
                f.instruction(&Instruction::I64Add);
                f.instruction(&Instruction::GlobalSet(counter));
            }
            for instruction in run.drain(..) {
                f.instruction(&instruction);
            }
            *fueled = 0;
        };
        while !reader.eof() {
            let op = reader.read()?;
            let (counts, boundary) = (fueled(&op), ends_run(&op));
            if starts_run(&op) {
                flush(&mut f, &mut run, &mut fueled_in_run);
            }
            fueled_in_run += i64::from(counts);
            run.push(self.instruction(op)?);
            if boundary {
                flush(&mut f, &mut run, &mut fueled_in_run);
            }
        }
        flush(&mut f, &mut run, &mut fueled_in_run);
        code.function(&f);
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_code_section(self, code, section)?;
        for i in 0..self.layout.functions {
            let mut reader = Function::new([]);
            reader.instruction(&Instruction::GlobalGet(self.layout.counter(i)));
            reader.instruction(&Instruction::End);
            code.function(&reader);
        }
        // Callback wrapper: raise the flag, call the callback, put the flag back as it was (a
        // request's callback may run inside another's hostcall).
        for (_, function) in &self.layout.callbacks {
            let ty = self.layout.type_of(*function).unwrap_or_default();
            let params = self
                .layout
                .params
                .get(ty as usize)
                .copied()
                .unwrap_or_default();
            let mut wrapper = Function::new([(1, ValType::I64)]);
            wrapper.instruction(&Instruction::GlobalGet(self.layout.flag()));
            wrapper.instruction(&Instruction::LocalSet(params));
            wrapper.instruction(&Instruction::I64Const(1));
            wrapper.instruction(&Instruction::GlobalSet(self.layout.flag()));
            for param in 0..params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(*function));
            wrapper.instruction(&Instruction::LocalGet(params));
            wrapper.instruction(&Instruction::GlobalSet(self.layout.flag()));
            wrapper.instruction(&Instruction::End);
            code.function(&wrapper);
        }
        self.sections += 1;
        Ok(())
    }

    /// A request callback is exported as its wrapper.
    fn parse_export(
        &mut self,
        exports: &mut ExportSection,
        export: wasmparser::Export<'_>,
    ) -> Result<(), Error> {
        let wrapped = (0..)
            .zip(&self.layout.callbacks)
            .find(|(_, (name, _))| export.kind == ExternalKind::Func && name == export.name);
        match wrapped {
            Some((k, _)) => {
                exports.export(export.name, ExportKind::Func, self.layout.wrapper(k));
                Ok(())
            }
            None => reencode::utils::parse_export(self, exports, export),
        }
    }
}

/// The counting copy of `wasm` (see the module docs).
pub fn counting(wasm: &[u8]) -> Result<Counting> {
    let layout = Layout::read(wasm)?;
    let mut module = wasm_encoder::Module::new();
    let mut counter = Counter {
        layout: &layout,
        next: 0,
        sections: 0,
    };
    counter
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| anyhow::anyhow!("cannot re-encode the module: {e}"))?;
    if counter.sections != 5 {
        bail!("the module lacks a type, function, global, export or code section");
    }
    let functions = (0..layout.functions)
        .map(|i| {
            let index = layout.imported_functions + i;
            layout
                .names
                .get(&index)
                .cloned()
                .unwrap_or_else(|| format!("#{index}"))
        })
        .collect();
    Ok(Counting {
        wasm: module.finish(),
        functions,
    })
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
