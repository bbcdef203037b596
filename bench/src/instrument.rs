//! A copy of a module that shows what the host cannot: its linear memory size and how often it
//! calls each hostcall.
//!
//! The wasmtime host (host-tests) keeps its stores to itself and counts fuel per export only, and
//! the bench must not change it. So the bench changes the guest instead: every import gets a
//! wrapper that bumps an `i64` global and then calls it, every call to an import is pointed at
//! its wrapper, and small exports read the counters and `memory.size`. The guest's own functions
//! keep their indices and their instructions, so the copy behaves as the original; only its fuel
//! grows, by a few instructions per hostcall, which is why fuel is measured on the original.

use anyhow::{bail, Context, Result};
use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
    GlobalType, Instruction, TypeSection, ValType,
};
use wasmparser::{Parser, Payload, TypeRef};

/// The export that answers the size of memory 0 in 64 KiB pages.
pub const MEMORY_PAGES: &str = "upcheck_bench_memory_pages";

/// The export that answers how often the guest called `import` (`module.name`).
pub fn counter_export(import: &str) -> String {
    format!("upcheck_bench_calls:{import}")
}

/// An instrumented module and the imports it counts.
pub struct Instrumented {
    /// The module, with the exports [`MEMORY_PAGES`] and [`counter_export`] of each import.
    pub wasm: Vec<u8>,
    /// The imported functions, `module.name`, in import order.
    pub imports: Vec<String>,
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

/// What the first pass learns; the second pass appends after what exists.
#[derive(Default)]
struct Layout {
    /// Imported functions, in import order.
    imports: Vec<Import>,
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
                Payload::FunctionSection(section) => layout.functions = section.count(),
                Payload::GlobalSection(section) => layout.globals += section.count(),
                _ => {}
            }
        }
        Ok(layout)
    }

    fn imports(&self) -> u32 {
        self.imports.len() as u32
    }

    /// The wrapper of import `i`: after every function the module defines.
    fn wrapper(&self, i: u32) -> u32 {
        self.imports() + self.functions + i
    }

    /// The counter of import `i`: after every global.
    fn counter(&self, i: u32) -> u32 {
        self.globals + i
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
        for _ in &self.layout.imports {
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
        let counter = GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        for _ in &self.layout.imports {
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
        let readers = self.layout.wrapper(self.layout.imports());
        for (i, import) in (0..).zip(&self.layout.imports) {
            exports.export(&counter_export(&import.name), ExportKind::Func, readers + i);
        }
        let memory_reader = readers + self.layout.imports();
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
        for i in 0..self.layout.imports() {
            let mut reader = Function::new([]);
            reader.instruction(&Instruction::GlobalGet(self.layout.counter(i)));
            reader.instruction(&Instruction::End);
            code.function(&reader);
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
    /// Wrapper `i`: bump counter `i`, pass every parameter on to import `i`.
    fn wrappers(&self, code: &mut CodeSection) {
        for (i, import) in (0..).zip(&self.layout.imports) {
            let counter = self.layout.counter(i);
            let mut wrapper = Function::new([]);
            wrapper.instruction(&Instruction::GlobalGet(counter));
            wrapper.instruction(&Instruction::I64Const(1));
            wrapper.instruction(&Instruction::I64Add);
            wrapper.instruction(&Instruction::GlobalSet(counter));
            for param in 0..import.params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(i));
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
    })
}
