//! A copy of a module that shows what the host cannot: its linear memory size and how often it
//! calls each hostcall, from which callback.
//!
//! The wasmtime host (host-tests) keeps its stores to itself and counts fuel per export only, and
//! the bench must not change it. So the bench changes the guest instead: every import gets a
//! wrapper that bumps an `i64` global and then calls it, every call to an import is pointed at
//! its wrapper, and small exports read the counters and `memory.size`. Each `proxy_on_*` export
//! is pointed at a wrapper too, which names the callback running in a global while it runs, so
//! an import's calls are counted per callback (a count per import and callback, picked by a
//! `br_table`). The guest's own functions keep their indices and their instructions, so the copy
//! behaves as the original; only its fuel grows, by a few instructions per hostcall and
//! callback, which is why fuel is measured on the original.

use crate::callbacks::CALLBACK_PREFIX;
use anyhow::{bail, Context, Result};
use std::borrow::Cow;
use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection,
    GlobalSection, GlobalType, Instruction, TypeSection, ValType,
};
use wasmparser::{ExternalKind, Parser, Payload, TypeRef};

/// The export that answers the size of memory 0 in 64 KiB pages.
pub const MEMORY_PAGES: &str = "upcheck_bench_memory_pages";

/// The export that answers how often the guest called `import` (`module.name`) while `callback`
/// (an export, e.g. `proxy_on_request_headers`) ran; `None` counts the calls outside any
/// `proxy_on_*` export.
pub fn counter_export(import: &str, callback: Option<&str>) -> String {
    format!(
        "upcheck_bench_calls:{import}@{}",
        callback.unwrap_or_default()
    )
}

/// An instrumented module and what it counts.
pub struct Instrumented {
    /// The module, with the exports [`MEMORY_PAGES`] and [`counter_export`] of each import and
    /// callback.
    pub wasm: Vec<u8>,
    /// The imported functions, `module.name`, in import order.
    pub imports: Vec<String>,
    /// The `proxy_on_*` exports, whose calls are counted apart.
    pub callbacks: Vec<String>,
}

/// An imported function.
struct Import {
    /// `module.name`.
    name: String,
    /// Its type index.
    ty: u32,
    /// How many parameters it takes.
    params: u32,
}

/// A `proxy_on_*` export, whose hostcalls are counted apart.
struct Callback {
    /// Its export name.
    name: String,
    /// The function it exports.
    function: u32,
    /// That function's type index.
    ty: u32,
    /// How many parameters it takes.
    params: u32,
}

/// What the first pass learns; the second pass appends after what exists.
#[derive(Default)]
struct Layout {
    /// Imported functions, in import order.
    imports: Vec<Import>,
    /// The callbacks, in export order; callback `k` is counted in slot `k + 1` (slot 0: no
    /// callback running).
    callbacks: Vec<Callback>,
    /// Types defined (every type of every rec group).
    types: u32,
    /// Functions defined in the module.
    functions: u32,
    /// Globals, imported and defined.
    globals: u32,
}

impl Layout {
    fn read(wasm: &[u8]) -> Result<Layout> {
        let mut layout = Layout::default();
        // Parameter counts by type index (0 for types that are not functions).
        let mut params = Vec::new();
        // Type indices of the defined functions.
        let mut defined = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        let import = import?;
                        match import.ty {
                            TypeRef::Func(ty) => layout.imports.push(Import {
                                name: format!("{}.{}", import.module, import.name),
                                ty,
                                params: *params.get(ty as usize).context("an unknown type")?,
                            }),
                            TypeRef::Global(_) => layout.globals += 1,
                            _ => {}
                        }
                    }
                }
                Payload::TypeSection(section) => {
                    for group in section {
                        for ty in group?.into_types() {
                            let count = match ty.composite_type.inner {
                                wasmparser::CompositeInnerType::Func(f) => f.params().len(),
                                _ => 0,
                            };
                            params.push(u32::try_from(count)?);
                        }
                    }
                    layout.types = u32::try_from(params.len())?;
                }
                Payload::FunctionSection(section) => {
                    layout.functions = section.count();
                    for ty in section {
                        defined.push(ty?);
                    }
                }
                Payload::GlobalSection(section) => layout.globals += section.count(),
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export?;
                        let tracked = export.kind == ExternalKind::Func
                            && export.name.starts_with(CALLBACK_PREFIX);
                        // An import exported again has no body here to count it by.
                        let Some(defined_at) = export.index.checked_sub(layout.imports()) else {
                            continue;
                        };
                        if !tracked {
                            continue;
                        }
                        let ty = *defined
                            .get(defined_at as usize)
                            .context("an export of an unknown function")?;
                        layout.callbacks.push(Callback {
                            name: export.name.to_owned(),
                            function: export.index,
                            ty,
                            params: *params.get(ty as usize).context("an unknown type")?,
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(layout)
    }

    fn imports(&self) -> u32 {
        self.imports.len() as u32
    }

    /// Counting slots per import: one per callback, and slot 0 for none.
    fn slots(&self) -> u32 {
        self.callbacks.len() as u32 + 1
    }

    /// The wrapper of import `i`: after every function the module defines.
    fn wrapper(&self, i: u32) -> u32 {
        self.imports() + self.functions + i
    }

    /// The wrapper of callback `k`: after the imports' wrappers.
    fn callback_wrapper(&self, k: u32) -> u32 {
        self.wrapper(self.imports()) + k
    }

    /// The first counter reader: after the callbacks' wrappers; one per import and slot.
    fn readers(&self) -> u32 {
        self.callback_wrapper(self.callbacks.len() as u32)
    }

    /// The global naming the slot of the callback running: after every global.
    fn running(&self) -> u32 {
        self.globals
    }

    /// The counter of import `i` in `slot`: after [`Layout::running`].
    fn counter(&self, i: u32, slot: u32) -> u32 {
        self.globals + 1 + i * self.slots() + slot
    }

    /// Type `() -> i64` of the counter readers; `() -> i32` of the memory reader is the next one.
    fn reader_type(&self) -> u32 {
        self.types
    }
}

/// The second pass: copies the module, adding wrappers, counters and readers.
struct Instrumenter<'a> {
    layout: &'a Layout,
    /// How many of the five sections the additions go into were seen (types, functions,
    /// globals, exports, code): all five must be, or the additions are incomplete.
    sections: usize,
}

type Error = reencode::Error<std::convert::Infallible>;

impl Reencode for Instrumenter<'_> {
    type Error = std::convert::Infallible;

    /// Every call to (or reference of) an import goes to its wrapper instead.
    fn function_index(&mut self, func: u32) -> Result<u32, Error> {
        Ok(if func < self.layout.imports() {
            self.layout.wrapper(func)
        } else {
            func
        })
    }

    /// A callback is exported as its wrapper, which names it while it runs.
    fn parse_export(
        &mut self,
        exports: &mut ExportSection,
        export: wasmparser::Export<'_>,
    ) -> Result<(), Error> {
        let wrapped = (0..)
            .zip(&self.layout.callbacks)
            .find(|(_, c)| export.kind == ExternalKind::Func && c.name == export.name);
        match wrapped {
            Some((k, _)) => {
                exports.export(
                    export.name,
                    ExportKind::Func,
                    self.layout.callback_wrapper(k),
                );
                Ok(())
            }
            None => reencode::utils::parse_export(self, exports, export),
        }
    }

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_type_section(self, types, section)?;
        types.ty().function([], [ValType::I64]);
        types.ty().function([], [ValType::I32]);
        self.sections += 1;
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_function_section(self, functions, section)?;
        for import in &self.layout.imports {
            functions.function(import.ty);
        }
        for callback in &self.layout.callbacks {
            functions.function(callback.ty);
        }
        for _ in 0..self.layout.imports() * self.layout.slots() {
            functions.function(self.layout.reader_type());
        }
        functions.function(self.layout.reader_type() + 1);
        self.sections += 1;
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_global_section(self, globals, section)?;
        let running = GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        };
        globals.global(running, &ConstExpr::i32_const(0));
        let counter = GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        for _ in 0..self.layout.imports() * self.layout.slots() {
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
        let readers = self.layout.readers();
        let callbacks: Vec<Option<&str>> = std::iter::once(None)
            .chain(self.layout.callbacks.iter().map(|c| Some(c.name.as_str())))
            .collect();
        for (i, import) in (0..).zip(&self.layout.imports) {
            for (slot, callback) in (0..).zip(&callbacks) {
                let reader = readers + i * self.layout.slots() + slot;
                let name = counter_export(&import.name, *callback);
                exports.export(&name, ExportKind::Func, reader);
            }
        }
        let memory_reader = readers + self.layout.imports() * self.layout.slots();
        exports.export(MEMORY_PAGES, ExportKind::Func, memory_reader);
        self.sections += 1;
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_code_section(self, code, section)?;
        self.wrappers(code);
        self.callback_wrappers(code);
        for i in 0..self.layout.imports() {
            for slot in 0..self.layout.slots() {
                let mut reader = Function::new([]);
                reader.instruction(&Instruction::GlobalGet(self.layout.counter(i, slot)));
                reader.instruction(&Instruction::End);
                code.function(&reader);
            }
        }
        let mut memory = Function::new([]);
        memory.instruction(&Instruction::MemorySize(0));
        memory.instruction(&Instruction::End);
        code.function(&memory);
        self.sections += 1;
        Ok(())
    }
}

impl Instrumenter<'_> {
    /// Wrapper `i`: bump import `i`'s counter of the slot running, pass every parameter on to
    /// import `i`. The slot picks the counter through a `br_table` over one block per slot: the
    /// table leaves block `slot`, after which that slot's counter is bumped.
    fn wrappers(&self, code: &mut CodeSection) {
        let slots = self.layout.slots();
        for (i, import) in (0..).zip(&self.layout.imports) {
            let mut wrapper = Function::new([]);
            wrapper.instruction(&Instruction::Block(BlockType::Empty)); // done
            for _ in 0..slots {
                wrapper.instruction(&Instruction::Block(BlockType::Empty));
            }
            wrapper.instruction(&Instruction::GlobalGet(self.layout.running()));
            let targets: Vec<u32> = (0..slots).collect();
            wrapper.instruction(&Instruction::BrTable(Cow::Owned(targets), 0));
            for slot in 0..slots {
                // The end of the block the table leaves for `slot`; `done` is `slots - slot`
                // blocks out from here.
                wrapper.instruction(&Instruction::End);
                let counter = self.layout.counter(i, slot);
                wrapper.instruction(&Instruction::GlobalGet(counter));
                wrapper.instruction(&Instruction::I64Const(1));
                wrapper.instruction(&Instruction::I64Add);
                wrapper.instruction(&Instruction::GlobalSet(counter));
                wrapper.instruction(&Instruction::Br(slots - 1 - slot));
            }
            wrapper.instruction(&Instruction::End); // done
            for param in 0..import.params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(i));
            wrapper.instruction(&Instruction::End);
            code.function(&wrapper);
        }
    }

    /// Callback wrapper `k`: name slot `k + 1` as running, call the callback with every
    /// parameter, then name again what ran before (a callback may run inside a hostcall).
    fn callback_wrappers(&self, code: &mut CodeSection) {
        for (k, callback) in (1..).zip(&self.layout.callbacks) {
            let before = callback.params;
            let mut wrapper = Function::new([(1, ValType::I32)]);
            wrapper.instruction(&Instruction::GlobalGet(self.layout.running()));
            wrapper.instruction(&Instruction::LocalSet(before));
            wrapper.instruction(&Instruction::I32Const(k));
            wrapper.instruction(&Instruction::GlobalSet(self.layout.running()));
            for param in 0..callback.params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(callback.function));
            wrapper.instruction(&Instruction::LocalGet(before));
            wrapper.instruction(&Instruction::GlobalSet(self.layout.running()));
            wrapper.instruction(&Instruction::End);
            code.function(&wrapper);
        }
    }
}

/// Instruments `wasm` (see the module docs).
pub fn instrument(wasm: &[u8]) -> Result<Instrumented> {
    let layout = Layout::read(wasm)?;
    let mut module = wasm_encoder::Module::new();
    let mut instrumenter = Instrumenter {
        layout: &layout,
        sections: 0,
    };
    instrumenter
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| anyhow::anyhow!("cannot re-encode the module: {e}"))?;
    if instrumenter.sections != 5 {
        bail!("the module lacks a type, function, global, export or code section");
    }
    Ok(Instrumented {
        wasm: module.finish(),
        imports: layout.imports.into_iter().map(|i| i.name).collect(),
        callbacks: layout.callbacks.into_iter().map(|c| c.name).collect(),
    })
}
