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


def tool_error(text: str) -> str:
    """The error a tool answered in ``text`` ("Error: ..." as the parent's tools answer one), or
    "" when it answered a result."""
    found = re.search(r"<tool_response>\s*(Error\b.*?)\s*</tool_response>", text, re.DOTALL)
    return found.group(1) if found else ""


def keyed(result: Any, **kinds: type | tuple[type, ...]) -> dict[str, Any]:
    """``result`` when it is an object with each key of ``kinds`` holding a value of that type
    (a bool is no number), as the parent's tool returns it; else :class:`Abstain`: keys renamed
    or values of another kind (cents where the parent gives dollars) are not what it reads."""
    if not isinstance(result, dict):
        raise Abstain(f"a tool result that is no object: {clip(json.dumps(result))}")
    for key, kind in kinds.items():
        value = result.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise Abstain(f"no {key!r} as the parent's tool gives it in {clip(json.dumps(result))}")
    return result


_AMOUNT = re.compile(r"\d+\.\d\d")
"""An amount as the parent's invoice writes it ("123.45")."""


def cents(amount: object) -> int:
    return round(float(str(amount)) * 100)


def money(amount: int) -> str:
    return f"{amount // 100}.{amount % 100:02d}"


class BankTransfer(Player):
    """Read the invoice, the accounts and the payee; move the shortfall from savings to
    checking; pay from checking with the invoice as reference; answer the confirmation. Each
    result is read only with the parent's keys and kinds of value (:func:`keyed`)."""

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
            self.bill = keyed(tool_result(text), invoice_id=str, payee=str, amount_due=str)
            if not _AMOUNT.fullmatch(self.bill["amount_due"]) or self.bill["invoice_id"] != (
                self.invoice
            ):
                raise Abstain(f"not the invoice {self.invoice} as the parent's: {clip(text)}")
            return call("list_accounts", customer=self.customer)
        if self.stage == 2:
            listed = tool_result(text)
            accounts = [keyed(a, account_id=str, type=str, balance=float) for a in listed]
            kinds = {a["type"]: a for a in accounts}
            if not {"checking", "savings"} <= set(kinds):
                raise Abstain(f"no checking and savings account in {clip(text)}")
            self.checking, self.savings = kinds["checking"], kinds["savings"]
            return call("lookup_payee", name=self.bill["payee"])
        if self.stage == 3:
            payee = keyed(tool_result(text), name=str, account_id=str)
            if payee["name"].lower() != self.bill["payee"].lower():
                raise Abstain(f"not the payee {self.bill['payee']!r}: {clip(text)}")
            self.payee = payee["account_id"]
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
            if tool_error(text):
                raise Contradiction(f"moving the shortfall failed: {clip(text)}")
            keyed(tool_result(text), confirmation=str, from_balance=float)
            return call(
                "transfer",
                from_account=self.checking["account_id"],
                to_account=self.payee,
                amount=cents(self.bill["amount_due"]) / 100,
                reference=self.invoice,
            )
        if tool_error(text):
            raise Contradiction(f"paying {self.bill} from {self.checking} failed: {clip(text)}")
        paid = keyed(tool_result(text), confirmation=str, from_balance=float)
        return f"<answer>{paid['confirmation']}</answer>"


class OrderFulfillment(Player):
    """Read the order and its products; restock those short of the ordered quantity; ship;
    answer the total of quantity times unit price. The order and each product are read only
    with the parent's keys and kinds of value (:func:`keyed`), of the order and skus asked."""

    def opening(self, text: str) -> str:
        self.order = need(r"Order (\S+) must ship", text, "order id").group(1)
        self.refill = int(need(r"stock to exactly (\d+) units", text, "restock level").group(1))
        self.queue: list[str] = []
        self.items: dict[str, int] = {}
        self.total = 0
        return call("get_order", order_id=self.order)

    def reply(self, text: str) -> str:
        result = None if tool_error(text) else tool_result(text)
        if not self.items:
            order = keyed(result, order_id=str, status=str, items=list)
            lines = [keyed(i, sku=str, quantity=int) for i in order["items"]]
            if order["order_id"] != self.order or not lines:
                raise Abstain(f"no items of order {self.order} in {clip(text)}")
            self.items = {i["sku"]: i["quantity"] for i in lines}
            self.queue = [call("get_product", sku=sku) for sku in self.items]
            self.looked = 0
        elif self.looked < len(self.items):
            product = keyed(result, sku=str, name=str, price=float, stock=int)
            sku = product["sku"]
            if sku not in self.items:
                raise Abstain(f"no product of the order in {clip(text)}")
            self.looked += 1
            self.total += self.items[sku] * cents(product["price"])
            if product["stock"] < self.items[sku]:
                self.queue.append(call("update_stock", sku=sku, quantity=self.refill))
            if self.looked == len(self.items):
                self.queue.append(call("ship_order", order_id=self.order))
        elif result is None:
            raise Contradiction(f"after the restock the tools said {clip(text)}")
        return self.queue.pop(0) if self.queue else f"<answer>{money(self.total)}</answer>"
