"""Players of the tool-calling examples: bank transfer and order fulfillment."""

from __future__ import annotations

import json
import re
from typing import Any

from spade.verify.players.base import Abstain, Contradiction, Player, call, clip, need


def tool_result(text: str) -> Any:
    """The JSON of the one tool response in ``text``; :class:`Abstain` on anything else (an
    error reply included: the caller decides whether it contradicts what it was told)."""
    found = need(r"<tool_response>\s*(.*?)\s*</tool_response>", text, "tool response", re.DOTALL)
    try:
        return json.loads(found.group(1))
    except json.JSONDecodeError:
        raise Abstain(f"a tool response that is not JSON: {clip(found.group(1))}") from None


def cents(amount: object) -> int:
    return round(float(str(amount)) * 100)


def money(amount: int) -> str:
    return f"{amount // 100}.{amount % 100:02d}"


class BankTransfer(Player):
    """Read the invoice, the accounts and the payee; move the shortfall from savings to
    checking; pay from checking with the invoice as reference; answer the confirmation."""

    def opening(self, text: str) -> str:
        found = need(
            r"^(.+?) asks you to pay invoice (\S+?)\.? in full", text, "customer and invoice"
        )
        self.customer, self.invoice = found.group(1), found.group(2)
        self.stage = 0
        return call("get_invoice", invoice_id=self.invoice)

    def reply(self, text: str) -> str:
        self.stage += 1
        if self.stage == 1:
            self.bill = tool_result(text)
            return call("list_accounts", customer=self.customer)
        if self.stage == 2:
            kinds = {a.get("type"): a for a in tool_result(text) if isinstance(a, dict)}
            if not {"checking", "savings"} <= set(kinds):
                raise Abstain(f"no checking and savings account in {clip(text)}")
            self.checking, self.savings = kinds["checking"], kinds["savings"]
            return call("lookup_payee", name=self.bill["payee"])
        if self.stage == 3:
            self.payee = tool_result(text)["account_id"]
            short = cents(self.bill["amount_due"]) - cents(self.checking["balance"])
            if short > 0:
                if cents(self.savings["balance"]) < short:
                    raise Contradiction(f"savings {self.savings} cannot cover {money(short)}")
                return call(
                    "transfer",
                    from_account=self.savings["account_id"],
                    to_account=self.checking["account_id"],
                    amount=short / 100,
                )
            self.stage += 1
        if self.stage == 4:
            if "Error" in text:
                raise Contradiction(f"moving the shortfall failed: {clip(text)}")
            return call(
                "transfer",
                from_account=self.checking["account_id"],
                to_account=self.payee,
                amount=cents(self.bill["amount_due"]) / 100,
                reference=self.invoice,
            )
        if "Error" in text:
            raise Contradiction(f"paying {self.bill} from {self.checking} failed: {clip(text)}")
        return f"<answer>{tool_result(text)['confirmation']}</answer>"


class OrderFulfillment(Player):
    """Read the order and its products; restock those short of the ordered quantity; ship;
    answer the total of quantity times unit price."""

    def opening(self, text: str) -> str:
        self.order = need(r"Order (\S+) must ship", text, "order id").group(1)
        self.refill = int(need(r"stock to exactly (\d+) units", text, "restock level").group(1))
        self.queue: list[str] = []
        self.items: dict[str, int] = {}
        self.total = 0
        return call("get_order", order_id=self.order)

    def reply(self, text: str) -> str:
        result = tool_result(text) if "<tool_response>" in text and "Error" not in text else None
        if not self.items:
            if not isinstance(result, dict) or not result.get("items"):
                raise Abstain(f"no order items in {clip(text)}")
            self.items = {i["sku"]: int(i["quantity"]) for i in result["items"]}
            self.queue = [call("get_product", sku=sku) for sku in self.items]
            self.looked = 0
        elif self.looked < len(self.items):
            if not isinstance(result, dict) or result.get("sku") not in self.items:
                raise Abstain(f"no product in {clip(text)}")
            self.looked += 1
            self.total += self.items[result["sku"]] * cents(result["price"])
            if int(result["stock"]) < self.items[result["sku"]]:
                self.queue.append(call("update_stock", sku=result["sku"], quantity=self.refill))
            if self.looked == len(self.items):
                self.queue.append(call("ship_order", order_id=self.order))
        elif result is None:
            raise Contradiction(f"after the restock the tools said {clip(text)}")
        return self.queue.pop(0) if self.queue else f"<answer>{money(self.total)}</answer>"
